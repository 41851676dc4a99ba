//! `tether bench plot`: the figures of docs/benchmarks.md, drawn as SVG from what a bench
//! printed with `--json`, with the papers' figures beside ours where they have one.

use std::path::Path;

use anyhow::{Context, bail};
use plotters::prelude::*;
use serde_json::Value;

/// Draws the figure for the JSON in `input` (any bench's `--json` output) into `out`.
pub(crate) fn plot(input: &Path, out: &Path) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(input).with_context(|| format!("reading {}", input.display()))?;
    let v: Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a bench's --json output", input.display()))?;
    let machine = v["machine"].as_str().unwrap_or("this machine").to_string();
    match v["bench"].as_str() {
        Some("latency") => latency(&v, &machine, out),
        Some("throughput") => throughput(&v, &machine, out),
        Some("fanout") => fanout(&v, &machine, out),
        Some("cipher") => cipher(&v, &machine, out),
        Some(other) => {
            bail!("no figure for `bench {other}` yet (latency, throughput, fanout, cipher)")
        }
        None => bail!(
            "{}: no \"bench\" field: not a bench's --json output",
            input.display()
        ),
    }
}

fn f(v: &Value, k: &str) -> Option<f64> {
    v[k].as_f64()
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

/// One group of bars: its label, and each bar's series index and value.
type Group = (String, Vec<(usize, f64)>);

/// Grouped bars: one group per label, one colour per series (named in the legend).
fn bars(
    out: &Path,
    title: &str,
    y_label: &str,
    series: &[&str],
    groups: &[Group],
    reference: Option<(&str, f64)>,
) -> anyhow::Result<()> {
    if groups.is_empty() {
        bail!("nothing to draw");
    }
    let top = groups
        .iter()
        .flat_map(|(_, b)| b.iter().map(|(_, y)| *y))
        .chain(reference.map(|(_, y)| y))
        .fold(0.0_f64, f64::max)
        * 1.15;
    let width = (160 + groups.len() * 90).max(640) as u32;
    let root = SVGBackend::new(out, (width, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = groups.len() as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(70)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n, 0.0..top.max(1e-9))?;
    let labels: Vec<String> = groups.iter().map(|(l, _)| l.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(groups.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = (*x - 0.5).round();
            if (*x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                labels.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .draw()?;
    let width_each = 0.8 / series.len().max(1) as f64;
    for (k, name) in series.iter().enumerate() {
        let colour = Palette99::pick(k).to_rgba();
        let rects: Vec<Rectangle<(f64, f64)>> = groups
            .iter()
            .enumerate()
            .filter_map(|(g, (_, b))| {
                b.iter().find(|(i, _)| *i == k).map(|(_, y)| {
                    let x0 = g as f64 + 0.1 + k as f64 * width_each;
                    Rectangle::new([(x0, 0.0), (x0 + width_each * 0.92, *y)], colour.filled())
                })
            })
            .collect();
        chart
            .draw_series(rects)?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    if let Some((name, y)) = reference {
        chart
            .draw_series(LineSeries::new(
                vec![(0.0, y), (n, y)],
                BLACK.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, yy)| {
                PathElement::new(vec![(x, yy), (x + 12, yy)], BLACK.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// One-way p50 per receive mode, placement and size: raw UDP, tether, tether secure.
fn latency(v: &Value, machine: &str, out: &Path) -> anyhow::Result<()> {
    let rows = v["results"].as_array().context("no results")?;
    let groups: Vec<Group> = rows
        .iter()
        .map(|r| {
            let mut b = vec![];
            for (i, k) in ["udp_p50_us", "tether_p50_us", "secure_p50_us"]
                .iter()
                .enumerate()
            {
                if let Some(y) = f(r, k) {
                    b.push((i, y));
                }
            }
            (
                format!("{} {} {} B", s(r, "mode"), s(r, "placement"), r["size"]),
                b,
            )
        })
        .collect();
    bars(
        out,
        &format!("One-way latency, p50 (RTT/2), {machine}"),
        "µs",
        &["raw UDP", "tether", "tether, secure realm"],
        &groups,
        None,
    )
}

/// Samples received per second per receiver, QoS and size: plain and in a secure realm.
fn throughput(v: &Value, machine: &str, out: &Path) -> anyhow::Result<()> {
    let rows = v["results"].as_array().context("no results")?;
    let groups: Vec<Group> = rows
        .iter()
        .map(|r| {
            let mut b = vec![];
            if let Some(y) = f(r, "received_per_s") {
                b.push((0, y / 1e6));
            }
            if let Some(y) = f(r, "secure_received_per_s") {
                b.push((1, y / 1e6));
            }
            (
                format!("{} {} {} B", s(r, "receiver"), s(r, "qos"), r["size"]),
                b,
            )
        })
        .collect();
    bars(
        out,
        &format!("Samples received per second, two processes, {machine}"),
        "million samples/s",
        &["plain", "secure realm"],
        &groups,
        None,
    )
}

/// Mean publish-to-receive time per subscriber count and mode, with the 000 paper's SROS2
/// figures (plain and encrypted) beside.
fn fanout(v: &Value, machine: &str, out: &Path) -> anyhow::Result<()> {
    let summary = v["summary"].as_array().context("no summary")?;
    let mut modes: Vec<String> = vec![];
    for r in summary {
        let m = s(r, "mode").to_string();
        if !modes.contains(&m) {
            modes.push(m);
        }
    }
    let paper: Vec<(f64, f64, f64)> = v["paper_table3"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| {
                    Some((
                        f(p, "subscribers")?,
                        f(p, "plain_s")? * 1e6,
                        f(p, "cipher_s")? * 1e6,
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    let xmax = summary
        .iter()
        .filter_map(|r| f(r, "subscribers"))
        .fold(10.0_f64, f64::max);
    let ymax = summary
        .iter()
        .filter_map(|r| f(r, "mean_us"))
        .chain(paper.iter().map(|p| p.2))
        .fold(1.0_f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(out, (760, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("Encrypted fan-out: mean time per sample, {machine}"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((1.0..xmax * 1.2).log_scale(), (50.0..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("subscribers")
        .y_desc("µs (log)")
        .draw()?;
    for (k, m) in modes.iter().enumerate() {
        let colour = Palette99::pick(k).to_rgba();
        let mut pts: Vec<(f64, f64)> = summary
            .iter()
            .filter(|r| s(r, "mode") == m)
            .filter_map(|r| Some((f(r, "subscribers")?, f(r, "mean_us")?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        chart
            .draw_series(LineSeries::new(pts.clone(), colour.stroke_width(2)))?
            .label(format!("tether {m}"))
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 12, y)], colour.stroke_width(2))
            });
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
    }
    if !paper.is_empty() {
        for (label, idx, colour) in [("000 paper: ROS 2", 1, BLACK), ("000 paper: SROS2", 2, RED)] {
            let pts: Vec<(f64, f64)> = paper
                .iter()
                .map(|p| (p.0, if idx == 1 { p.1 } else { p.2 }))
                .collect();
            chart
                .draw_series(LineSeries::new(pts, colour.stroke_width(1)))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 12, y)], colour.stroke_width(1))
                });
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Encryption speed per cipher at each buffer size, with the 003 paper's ChaCha20 on a
/// Raspberry Pi 4 (415,000 KB/s) as a line.
fn cipher(v: &Value, machine: &str, out: &Path) -> anyhow::Result<()> {
    let rows = v["results"].as_array().context("no results")?;
    let mut ciphers: Vec<String> = vec![];
    let mut sizes: Vec<u64> = vec![];
    for r in rows {
        let c = s(r, "cipher").to_string();
        if !ciphers.contains(&c) {
            ciphers.push(c);
        }
        if let Some(b) = r["buffer"].as_u64() {
            if !sizes.contains(&b) {
                sizes.push(b);
            }
        }
    }
    let groups: Vec<Group> = sizes
        .iter()
        .map(|size| {
            let b = rows
                .iter()
                .filter(|r| r["buffer"].as_u64() == Some(*size))
                .filter_map(|r| {
                    let i = ciphers.iter().position(|c| c == s(r, "cipher"))?;
                    Some((i, f(r, "encrypt_kb_per_s")? / 1e6))
                })
                .collect();
            (format!("{size} B"), b)
        })
        .collect();
    let names: Vec<&str> = ciphers.iter().map(String::as_str).collect();
    bars(
        out,
        &format!("Encryption speed, {machine}"),
        "GB/s",
        &names,
        &groups,
        Some(("003 paper: ChaCha20, Raspberry Pi 4", 0.415)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each kind of `--json` output draws a figure naming what it shows; a file that is no
    /// bench's output is refused with a clear error.
    #[test]
    fn figures_from_each_bench_and_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                r#"{"bench":"latency","machine":"m","results":[{"mode":"blocking","placement":"cross-core","size":64,"udp_p50_us":20.0,"tether_p50_us":22.0,"secure_p50_us":24.0}]}"#,
                "tether, secure realm",
            ),
            (
                r#"{"bench":"throughput","machine":"m","results":[{"receiver":"blocking","qos":"reliable batched","size":256,"received_per_s":3.0e6,"secure_received_per_s":2.7e6}]}"#,
                "secure realm",
            ),
            (
                r#"{"bench":"fanout","machine":"m","summary":[{"mode":"plain","subscribers":2,"mean_us":200.0},{"mode":"group","subscribers":2,"mean_us":230.0},{"mode":"plain","subscribers":10,"mean_us":300.0},{"mode":"group","subscribers":10,"mean_us":330.0}],"paper_table3":[{"subscribers":2,"plain_s":0.0024,"cipher_s":0.0023},{"subscribers":10,"plain_s":0.0116,"cipher_s":0.0274}]}"#,
                "SROS2",
            ),
            (
                r#"{"bench":"cipher","machine":"m","results":[{"cipher":"AES-128-GCM","buffer":8192,"encrypt_kb_per_s":9.0e6},{"cipher":"ChaCha20-Poly1305","buffer":8192,"encrypt_kb_per_s":2.3e6}]}"#,
                "Raspberry Pi 4",
            ),
        ];
        for (i, (json, expect)) in cases.iter().enumerate() {
            let input = dir.path().join(format!("{i}.json"));
            let out = dir.path().join(format!("{i}.svg"));
            std::fs::write(&input, json).unwrap();
            plot(&input, &out).unwrap();
            let svg = std::fs::read_to_string(&out).unwrap();
            assert!(svg.starts_with("<svg"), "case {i}");
            assert!(svg.contains(expect), "case {i}: no {expect:?}");
        }
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, r#"{"x":1}"#).unwrap();
        let e = plot(&bad, &dir.path().join("bad.svg")).unwrap_err();
        assert!(e.to_string().contains("not a bench's --json output"), "{e}");
    }
}
