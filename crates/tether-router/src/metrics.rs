//! Metrics in the Prometheus text exposition format (version 0.0.4), served over HTTP at
//! `/metrics`. The router renders a fresh page from its counters on every scrape, so
//! nothing here keeps state between scrapes; [`Metrics`] only writes the format right
//! (one `# HELP`/`# TYPE` per family, label values escaped).

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// One page of metrics being written.
#[derive(Debug, Default)]
pub struct Metrics {
    out: String,
    families: Vec<&'static str>,
}

/// Escapes a label value as the format asks (backslash, double quote, newline).
fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

impl Metrics {
    /// An empty page.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    fn sample(
        &mut self,
        kind: &str,
        name: &'static str,
        help: &str,
        labels: &[(&str, &str)],
        value: f64,
    ) {
        if !self.families.contains(&name) {
            self.families.push(name);
            let _ = writeln!(self.out, "# HELP {name} {help}");
            let _ = writeln!(self.out, "# TYPE {name} {kind}");
        }
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }

    /// A counter (only ever grows). Samples of one family must be written together.
    pub fn counter(&mut self, name: &'static str, help: &str, labels: &[(&str, &str)], v: u64) {
        self.sample("counter", name, help, labels, v as f64);
    }

    /// A gauge (goes up and down).
    pub fn gauge(&mut self, name: &'static str, help: &str, labels: &[(&str, &str)], v: f64) {
        self.sample("gauge", name, help, labels, v);
    }

    /// The page.
    pub fn finish(self) -> String {
        self.out
    }
}

/// Longest request head read; a scraper sends far less.
const MAX_REQUEST: usize = 8 << 10;

/// Serves `render()` at `GET /metrics` on `listener` until the task is dropped. Each
/// connection gets one answer and is closed; a client that sends nothing for 5 s, or
/// more than 8 KiB of head, is dropped.
pub async fn serve(listener: TcpListener, render: Arc<dyn Fn() -> String + Send + Sync>) {
    loop {
        let Ok((mut conn, _)) = listener.accept().await else {
            // Out of descriptors, say: try again shortly rather than spin.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let mut buf = Vec::with_capacity(512);
            let head = tokio::time::timeout(Duration::from_secs(5), async {
                let mut chunk = [0u8; 1024];
                loop {
                    let n = conn.read(&mut chunk).await.ok()?;
                    if n == 0 {
                        return None;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    if buf.windows(4).any(|w| w == b"\r\n\r\n")
                        || buf.windows(2).any(|w| w == b"\n\n")
                    {
                        return Some(());
                    }
                    if buf.len() > MAX_REQUEST {
                        return None;
                    }
                }
            })
            .await;
            if !matches!(head, Ok(Some(()))) {
                return;
            }
            let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
            let line = String::from_utf8_lossy(line);
            let mut parts = line.split_whitespace();
            let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let path = target.split('?').next().unwrap_or("");
            let (status, ctype, body) = match (method, path) {
                ("GET", "/metrics") => (
                    "200 OK",
                    "text/plain; version=0.0.4; charset=utf-8",
                    render(),
                ),
                ("GET", _) => (
                    "404 Not Found",
                    "text/plain; charset=utf-8",
                    "only /metrics is served here\n".to_string(),
                ),
                _ => (
                    "405 Method Not Allowed",
                    "text/plain; charset=utf-8",
                    "GET /metrics\n".to_string(),
                ),
            };
            let reply = format!(
                "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = conn.write_all(reply.as_bytes()).await;
            let _ = conn.shutdown().await;
        });
    }
}

/// Binds `addr` for [`serve`], saying clearly what went wrong.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("metrics address {addr}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn format_has_one_header_per_family_and_escapes_labels() {
        let mut m = Metrics::new();
        m.counter(
            "tether_router_frames_total",
            "Frames forwarded.",
            &[("link", "a\"b")],
            3,
        );
        m.counter(
            "tether_router_frames_total",
            "Frames forwarded.",
            &[("link", "c\\d")],
            4,
        );
        m.gauge("tether_router_routes", "Routes in the RIB.", &[], 2.0);
        let page = m.finish();
        assert_eq!(
            page,
            "# HELP tether_router_frames_total Frames forwarded.\n\
             # TYPE tether_router_frames_total counter\n\
             tether_router_frames_total{link=\"a\\\"b\"} 3\n\
             tether_router_frames_total{link=\"c\\\\d\"} 4\n\
             # HELP tether_router_routes Routes in the RIB.\n\
             # TYPE tether_router_routes gauge\n\
             tether_router_routes 2\n"
        );
    }

    #[tokio::test]
    async fn served_over_http() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let task = tokio::spawn(serve(l, Arc::new(|| "x 1\n".to_string())));
        let get = |req: &'static str| async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(req.as_bytes()).await.unwrap();
            let mut s = String::new();
            c.read_to_string(&mut s).await.unwrap();
            s
        };
        let r = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.ends_with("\r\n\r\nx 1\n"), "{r}");
        let r = get("GET / HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
        let r = get("POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(r.starts_with("HTTP/1.1 405"), "{r}");
        task.abort();
    }
}
