//! Issue 18, point 6: data in and out. `pub` takes its payload from the command line,
//! standard input (`-`), `--file` or `--hex`; `echo` prints samples with clear boundaries,
//! in hex, cut, with their metadata, raw for programs, and pretty-prints JSON and CBOR as
//! the publisher's `--encoding` label says. Real processes on loopback.

mod common;
use common::{finish, tether, text};

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

fn spawn(mut c: Command, stdin: Option<&[u8]>) -> Child {
    c.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    if let Some(b) = stdin {
        let mut i = child.stdin.take().unwrap();
        i.write_all(b).unwrap();
    }
    child
}

/// Runs `echo TOPIC ECHO_ARGS` while each of `pubs` (`pub TOPIC …`, with its standard
/// input) runs in turn; echo's output, after every `pub` exited 0.
fn exchange(topic: &str, echo_args: &[&str], pubs: &[(Vec<&str>, Option<&[u8]>)]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", topic, "--timeout", "30", "-q"])
        .args(echo_args);
    let echo = spawn(e, None);
    for (args, stdin) in pubs {
        let mut p = tether(dir.path());
        p.args(["pub", topic]).args(args).args(["--once", "-q"]);
        let out = finish(spawn(p, *stdin), Duration::from_secs(40));
        assert!(out.status.success(), "pub {args:?}: {}", text(&out.stderr));
    }
    let out = finish(echo, Duration::from_secs(40));
    assert!(out.status.success(), "echo: {}", text(&out.stderr));
    out
}

/// Any bytes from standard input (`-`), a file (`--file`) and hex (`--hex`) arrive as
/// they were: `echo --raw len` gives each sample's length and its bytes, nothing else.
#[test]
fn stdin_file_and_hex_payloads_arrive_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let all: Vec<u8> = (0..=255u8).chain([b'\n', 0, b'-']).collect();
    let file = dir.path().join("scan.bin");
    std::fs::write(&file, [0xde, 0xad, 0x0a, 0xbe, 0xef]).unwrap();
    let f = file.to_str().unwrap();
    let out = exchange(
        "/bin",
        &["--raw", "len", "--count", "4"],
        &[
            (vec!["-"], Some(&all[..])),
            (vec!["--file", f], None),
            (vec!["--hex", "0x00ff 10"], None),
            // An empty standard input is an empty sample, not "-".
            (vec!["-"], Some(&b""[..])),
        ],
    );
    let mut want = Vec::new();
    for s in [
        &all[..],
        &[0xde, 0xad, 0x0a, 0xbe, 0xef],
        &[0x00, 0xff, 0x10],
        &[],
    ] {
        want.extend_from_slice(&(s.len() as u32).to_le_bytes());
        want.extend_from_slice(s);
    }
    assert_eq!(out.stdout, want);
}

/// `--raw lines`: each sample's bytes then a newline, for programs that read lines.
#[test]
fn raw_lines_are_the_bytes_and_a_newline() {
    let out = exchange(
        "/lines",
        &["--raw", "lines", "--count", "3"],
        &[
            (vec!["first"], None),
            (vec!["\"quoted\" and 0xff"], None),
            (vec!["--hex", "c3a9"], None),
        ],
    );
    assert_eq!(out.stdout, b"first\n\"quoted\" and 0xff\n\xc3\xa9\n");
}

/// The default output: one line per sample, a line break inside a sample shown as `\n`
/// in a quoted string, bytes that are not text as 0x and hex (and `--hex` prints text so
/// too), so one sample is always one line.
#[test]
fn one_line_per_sample_text_quoted_or_hex() {
    let out = exchange(
        "/lines2",
        &["--count", "4"],
        &[
            (vec!["plain text"], None),
            (vec!["-"], Some(&b"two\nlines"[..])),
            (vec!["--hex", "00 01 ff"], None),
            (vec!["0xbeef"], None),
        ],
    );
    assert_eq!(
        text(&out.stdout),
        "plain text\n\"two\\nlines\"\n0x0001ff\n\"0xbeef\"\n"
    );
    let out = exchange("/hex", &["--hex", "--once"], &[(vec!["Hi"], None)]);
    assert_eq!(text(&out.stdout), "0x4869\n");
}

/// A large sample is cut at --truncate bytes (1024 by default) with a marker saying how
/// much was not shown; `--truncate 0` shows all.
#[test]
fn long_samples_are_cut() {
    let out = exchange(
        "/big",
        &["--count", "1"],
        &[(vec!["ab", "--size", "5000"], None)],
    );
    let line = text(&out.stdout);
    assert_eq!(
        line,
        format!(
            "{} … [3976 of 5000 bytes not shown; --truncate 0 shows all]\n",
            "ab".repeat(512)
        )
    );
    let out = exchange(
        "/big",
        &["--truncate", "6", "--count", "1"],
        &[(vec!["ab", "--size", "5000"], None)],
    );
    assert_eq!(
        text(&out.stdout),
        "ababab … [4994 of 5000 bytes not shown; --truncate 0 shows all]\n"
    );
    let out = exchange(
        "/big",
        &["--truncate", "0", "--count", "1"],
        &[(vec!["ab", "--size", "5000"], None)],
    );
    assert_eq!(text(&out.stdout), format!("{}\n", "ab".repeat(2500)));
}

/// `--meta`: the sequence number, source time (UTC), writer and size before each sample.
#[test]
fn meta_shows_sequence_time_writer_and_size() {
    let dir = tempfile::tempdir().unwrap();
    let mut e = tether(dir.path());
    e.args(["echo", "/meta", "--meta", "--count", "3", "--timeout", "30"]);
    let echo = spawn(e, None);
    let mut p = tether(dir.path());
    p.args(["pub", "/meta", "hello", "-n", "3", "-r", "20", "-q"]);
    let pout = finish(spawn(p, None), Duration::from_secs(40));
    assert!(pout.status.success(), "{}", text(&pout.stderr));
    let out = finish(echo, Duration::from_secs(40));
    let s = text(&out.stdout);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 3, "{s}");
    let year = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 31_556_952
        + 1970;
    let mut writer = None;
    for (i, l) in lines.iter().enumerate() {
        let (meta, body) = l.split_once("] ").unwrap_or_else(|| panic!("{l}"));
        assert_eq!(body, "hello");
        let f: Vec<&str> = meta.trim_start_matches('[').split(" | ").collect();
        assert_eq!(f.len(), 4, "{l}");
        assert_eq!(f[0], format!("seq {}", i + 1));
        // 2026-11-27T00:39:38.318705765Z
        let t = f[1];
        assert!(
            t.len() == 30 && t.ends_with('Z') && t.as_bytes()[10] == b'T',
            "{t}"
        );
        let y: u64 = t[..4].parse().unwrap();
        assert!(y.abs_diff(year) <= 1, "{t}");
        let w = f[2]
            .strip_prefix("writer ")
            .unwrap_or_else(|| panic!("{l}"));
        assert!(writer.is_none_or(|x| x == w), "one writer: {s}");
        writer = Some(w);
        assert_eq!(f[3], "5 bytes");
    }
}

/// `--encoding json`: announced with the publisher; `echo` prints each sample as indented
/// JSON followed by a `---` line, and `--meta` names the label. `--format text` prints
/// the same sample on one line.
#[test]
fn json_is_pretty_printed_by_its_label() {
    let json = r#"{"pose":{"x":1.5,"y":-2},"ok":true,"tags":["a","b"]}"#;
    let out = exchange(
        "/pose",
        &["--count", "2"],
        &[
            (vec![json, "--encoding", "json"], None),
            (vec!["-", "--encoding", "json"], Some(b"[1,\n 2]")),
        ],
    );
    assert_eq!(
        text(&out.stdout),
        "{\n  \"pose\": {\n    \"x\": 1.5,\n    \"y\": -2\n  },\n  \"ok\": true,\n  \"tags\": [\n    \"a\",\n    \"b\"\n  ]\n}\n---\n[\n  1,\n  2\n]\n---\n"
    );
    let out = exchange(
        "/pose",
        &["--meta", "--once"],
        &[(vec![r#"{"a":1}"#, "--encoding", "json"], None)],
    );
    let s = text(&out.stdout);
    let (meta, rest) = s.split_once('\n').unwrap();
    assert!(meta.ends_with(" | 7 bytes | json]"), "{meta}");
    assert_eq!(rest, "{\n  \"a\": 1\n}\n---\n");
    let out = exchange(
        "/pose",
        &["--format", "text", "--once"],
        &[(vec![r#"{"a":1}"#, "--encoding", "json"], None)],
    );
    assert_eq!(text(&out.stdout), "{\"a\":1}\n");
    // Without a label, JSON text is one line like any text.
    let out = exchange("/pose", &["--once"], &[(vec![r#"{"a":1}"#], None)]);
    assert_eq!(text(&out.stdout), "{\"a\":1}\n");
}

/// `--encoding cbor`: CBOR bytes (here from --hex, RFC 8949's example) printed as
/// indented JSON; `bytes` prints even text in hex.
#[test]
fn cbor_is_pretty_printed_and_bytes_are_hex() {
    let out = exchange(
        "/cbor",
        &["--count", "2"],
        &[
            // {"a": 1, "b": [2, 3]}
            (
                vec!["--hex", "a26161016162820203", "--encoding", "cbor"],
                None,
            ),
            (vec!["text", "--encoding", "bytes"], None),
        ],
    );
    assert_eq!(
        text(&out.stdout),
        "{\n  \"a\": 1,\n  \"b\": [\n    2,\n    3\n  ]\n}\n---\n0x74657874\n"
    );
}

/// A payload that is not what its label says is refused before anything is published,
/// saying what to do.
#[test]
fn a_payload_unlike_its_label_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (args, what) in [
        (vec!["{\"a\":", "--encoding", "json"], "not json"),
        (vec!["--hex", "a2", "--encoding", "cbor"], "not cbor"),
        (vec!["--hex", "ff", "--encoding", "text"], "not text"),
        (
            vec!["{}", "--encoding", "json", "--numbered"],
            "--numbered puts a number before each payload",
        ),
    ] {
        let mut p = tether(dir.path());
        p.arg("pub").arg("/label").args(&args).arg("--once");
        let out = finish(spawn(p, None), Duration::from_secs(20));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(what), "{args:?}: {err}");
        assert!(
            !err.contains("matched"),
            "it waited for a subscriber: {err}"
        );
    }
}

/// A standard input larger than a sample can be is refused without reading it all.
#[test]
fn stdin_larger_than_a_sample_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("small.toml");
    std::fs::write(&cfg, "[transport]\nmax_sample_size = 1000\n").unwrap();
    let mut p = tether(dir.path());
    p.arg("--config")
        .arg(&cfg)
        .args(["pub", "/x", "-", "--once"]);
    let out = finish(spawn(p, Some(&[7u8; 1001])), Duration::from_secs(20));
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("standard input is more than the largest sample"),
        "{err}"
    );
}

/// docs/cli.md shows the structured-data example as it is in
/// crates/tether/examples/structured.rs (which `cargo test` compiles): the lines between
/// its `[structured]` markers, unindented, without rustfmt attributes.
#[test]
fn the_documented_serde_example_is_the_compiled_one() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let example =
        std::fs::read_to_string(root.join("crates/tether/examples/structured.rs")).unwrap();
    let blocks: Vec<&str> = example.split("// [structured]\n").collect();
    assert_eq!(blocks.len(), 5, "two marked blocks");
    let shown: Vec<String> = [blocks[1], blocks[3]]
        .iter()
        .map(|b| {
            b.lines()
                .map(str::trim_start)
                .filter(|l| !l.starts_with("#[rustfmt::skip]") && !l.starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n")
                .trim()
                .to_string()
        })
        .collect();
    let snippet = format!("```rust\n{}\n\n{}\n```", shown[0], shown[1]);
    for page in ["docs/cli.md", "README.md"] {
        let doc = std::fs::read_to_string(root.join(page)).unwrap();
        assert!(doc.contains(&snippet), "{page} lacks:\n{snippet}");
    }
    let code_lines = snippet
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with("```"));
    assert!(code_lines.count() <= 10);
}

/// Every link of docs/cli.md stays in the repository and names a file that exists.
#[test]
fn docs_cli_md_links_stay_in_the_repository() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let doc = std::fs::read_to_string(docs.join("cli.md")).unwrap();
    let mut n = 0;
    for (i, _) in doc.match_indices("](") {
        let target = doc[i + 2..].split(')').next().unwrap();
        n += 1;
        assert!(
            !target.contains("://") && !target.starts_with('/') && !target.starts_with("mailto:"),
            "{target} points outside the repository"
        );
        let file = target.split('#').next().unwrap();
        if !file.is_empty() {
            assert!(docs.join(file).exists(), "{target}: no such file");
        }
    }
    assert!(n >= 3, "{n} links");
}
