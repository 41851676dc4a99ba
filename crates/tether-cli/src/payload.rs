//! Payloads in and out. A sample's payload is bytes; tether gives them no meaning.
//!
//! In: `pub` publishes DATA as given (any bytes the shell passes), standard input with `-`,
//! a file with `--file`, or bytes written in hex with `--hex`; `--size` repeats them to a
//! size. Every source is checked against `transport.max_sample_size` before anything that
//! large is allocated or read.
//!
//! Out: `echo` prints one line per sample: printable text as it is; other text (a line
//! break, a control character, or text that would read as one of the other forms) as a
//! JSON string in quotes; anything else in hex after `0x`. So a line is hex if and only if
//! it starts with `0x`, and a quoted string if and only if it starts with `"`. Long
//! samples are cut (`--truncate`, 1024 bytes by default) with a marker saying how much was
//! left out. `--hex` prints every sample in hex, `--meta` puts the sample's sequence
//! number, source time, writer, size and label before it. A writer that labels its
//! payloads `json` or `cbor` (`pub --encoding`) has them printed as indented JSON, in the
//! order the sample has its members, with a `---` line after each (`--format` chooses
//! regardless of the label), and `--raw lines|len` writes the bytes alone, for programs.

use std::ffi::OsString;
use std::io::{self, IsTerminal, Read, Write};
use std::path::{Path, PathBuf};

use bytes::Bytes;
use clap::{Args, ValueEnum};
use tether::{Encoding, Sample};

use crate::topic::human_bytes;

/// What `echo` prints of a sample by default, and `pub` of what it publishes.
pub(crate) const DEFAULT_TRUNCATE: usize = 1024;

/// Where `pub`'s payload comes from.
#[derive(Args, Debug)]
pub(crate) struct InputArgs {
    /// The payload: the bytes given (text, or any bytes the shell passes); `-` reads them
    /// from standard input, to its end. Default: hello.
    #[arg(value_name = "DATA", conflicts_with_all = ["file", "hex"])]
    data: Option<OsString>,
    /// Publish the bytes of this file.
    #[arg(long, value_name = "PATH", conflicts_with = "hex")]
    file: Option<PathBuf>,
    /// Publish these bytes, written in hex: `48656c6c6f`, `0x48656c6c6f` or `48 65 6c 6c
    /// 6f` (what `echo --hex` prints).
    #[arg(long, value_name = "HEX")]
    hex: Option<String>,
    /// Payload size in bytes: the payload is repeated (or cut) to fill SIZE bytes; at most
    /// transport.max_sample_size (256 MiB by default).
    #[arg(long, value_name = "BYTES", value_parser = size_arg)]
    size: Option<u64>,
}

/// `--size`: a number of bytes, with a clear error for anything else.
fn size_arg(v: &str) -> Result<u64, String> {
    v.trim().parse::<u64>().map_err(|_| {
        if !v.is_empty() && v.trim().bytes().all(|b| b.is_ascii_digit()) {
            format!(
                "{v} bytes is more than any sample can hold (transport.max_sample_size is at \
                 most {})",
                u32::MAX
            )
        } else {
            format!("'{v}' is not a number of bytes (e.g. --size 1000)")
        }
    })
}

impl InputArgs {
    /// The payload, at most `max` bytes (`transport.max_sample_size`): a larger one is an
    /// error that says what to do, found before it is allocated or read whole.
    pub(crate) fn load(&self, max: usize) -> anyhow::Result<Bytes> {
        let too_large = |what: String| {
            anyhow::anyhow!(
                "{what} is more than the largest sample, transport.max_sample_size = {max} \
                 bytes ({}): publish at most that, or raise max_sample_size in a config file \
                 (--config)",
                human_bytes(max as f64)
            )
        };
        if let Some(n) = self.size {
            if n > max as u64 {
                return Err(too_large(format!("--size {n}")));
            }
        }
        let base = if let Some(h) = &self.hex {
            parse_hex(h)?
        } else if let Some(p) = &self.file {
            read_file(p, max).map_err(|e| match e {
                Load::TooLarge => too_large(format!("--file {}", p.display())),
                Load::Io(e) => {
                    anyhow::Error::new(e).context(format!("cannot read --file {}", p.display()))
                }
            })?
        } else {
            match &self.data {
                Some(d) if d == "-" => read_stdin(max).map_err(|e| match e {
                    Load::TooLarge => too_large("standard input".into()),
                    Load::Io(e) => anyhow::Error::new(e).context("cannot read standard input"),
                })?,
                Some(d) => os_bytes(d),
                None => b"hello".to_vec(),
            }
        };
        if base.len() > max && self.size.is_none() {
            return Err(too_large(format!("a payload of {} bytes", base.len())));
        }
        Ok(match self.size {
            None => Bytes::from(base),
            Some(n) => {
                let src: &[u8] = if base.is_empty() { b"x" } else { &base };
                // n ≤ max was checked above.
                Bytes::from(
                    src.iter()
                        .copied()
                        .cycle()
                        .take(n as usize)
                        .collect::<Vec<u8>>(),
                )
            }
        })
    }
}

/// `pub --encoding`: one of text, json, cbor, cdr, bytes (or unset).
pub(crate) fn encoding_arg(v: &str) -> Result<Encoding, String> {
    v.parse()
        .map_err(|e: tether::UnknownEncoding| e.to_string())
}

/// Whether `data` is what `label` says it is, for the labels a payload can be checked
/// against (text, json, cbor): a sample that `echo` would fail to print as labelled is
/// refused before it is published. cdr and bytes are not checked.
pub(crate) fn check_encoding(data: &[u8], label: Encoding) -> anyhow::Result<()> {
    let why = match label {
        Encoding::Text => std::str::from_utf8(data).err().map(|e| e.to_string()),
        Encoding::Json => serde_json::from_slice::<serde_json::Value>(data)
            .err()
            .map(|e| e.to_string()),
        Encoding::Cbor => crate::cbor::decode(data).err().map(|e| e.to_string()),
        _ => None,
    };
    match why {
        None => Ok(()),
        Some(why) => anyhow::bail!(
            "the payload is not {label} ({why}), as --encoding {label} says it is: correct \
             it, or label it as what it is (--encoding bytes for any bytes)"
        ),
    }
}

/// Why a payload could not be read.
enum Load {
    /// More than the largest sample.
    TooLarge,
    /// The file or the pipe failed.
    Io(io::Error),
}

/// The bytes of an argument, whatever they are (on Unix, arguments are bytes).
fn os_bytes(s: &OsString) -> Vec<u8> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        s.as_bytes().to_vec()
    }
    #[cfg(not(unix))]
    {
        s.to_string_lossy().into_owned().into_bytes()
    }
}

/// At most `max` bytes from `r`; more is [`Load::TooLarge`].
fn read_limited(r: impl io::Read, max: usize) -> Result<Vec<u8>, Load> {
    let mut v = Vec::new();
    r.take(max as u64 + 1)
        .read_to_end(&mut v)
        .map_err(Load::Io)?;
    if v.len() > max {
        return Err(Load::TooLarge);
    }
    Ok(v)
}

fn read_file(p: &Path, max: usize) -> Result<Vec<u8>, Load> {
    let f = std::fs::File::open(p).map_err(Load::Io)?;
    let m = f.metadata().map_err(Load::Io)?;
    if m.is_dir() {
        return Err(Load::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is a directory; give a file",
        )));
    }
    // A regular file says its length: no need to read what would be refused.
    if m.is_file() && m.len() > max as u64 {
        return Err(Load::TooLarge);
    }
    read_limited(f, max)
}

fn read_stdin(max: usize) -> Result<Vec<u8>, Load> {
    let stdin = io::stdin();
    if stdin.is_terminal() {
        eprintln!("reading the payload from standard input, up to end of file (Ctrl-D)");
    }
    read_limited(stdin.lock(), max)
}

/// Bytes written in hex: pairs of digits, spaces allowed, each word may start with `0x`.
pub(crate) fn parse_hex(h: &str) -> anyhow::Result<Vec<u8>> {
    let digits: String = h
        .split_whitespace()
        .map(|w| {
            w.strip_prefix("0x")
                .or_else(|| w.strip_prefix("0X"))
                .unwrap_or(w)
        })
        .collect();
    if let Some(c) = digits.chars().find(|c| !c.is_ascii_hexdigit()) {
        anyhow::bail!(
            "--hex: '{c}' is not a hex digit: give pairs of digits 0-9 a-f, such as --hex \
             48656c6c6f (spaces and a 0x prefix are allowed)"
        );
    }
    if digits.len() % 2 != 0 {
        anyhow::bail!(
            "--hex: {} digits is an odd number: each byte is two digits (0a, not a)",
            digits.len()
        );
    }
    Ok(tether_crypto::from_hex(&digits).unwrap_or_default())
}

/// `echo --raw`: how samples are framed when written as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Raw {
    /// Each sample's bytes, then a newline (for samples that hold none).
    Lines,
    /// Each sample's length (4 bytes, little-endian), then its bytes: any bytes.
    Len,
}

/// `echo --format`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// As the writer's encoding label (`pub --encoding`) says: `json` and `cbor` as
    /// indented JSON then a `---` line, `bytes` and `cdr` in hex, `text` and no label one
    /// line per sample.
    #[default]
    Auto,
    /// One line per sample, whatever the label: text, a quoted string, or 0x and hex.
    Text,
    /// Indented JSON, then a `---` line.
    Json,
    /// CBOR printed as indented JSON, then a `---` line.
    Cbor,
}

/// How `echo` prints samples.
#[derive(Args, Debug)]
pub(crate) struct OutputArgs {
    /// Write each sample's bytes as they are and nothing else, for programs: `lines` ends
    /// each with a newline (for samples without one), `len` puts each one's length before
    /// it as 4 bytes, little-endian (for any bytes).
    #[arg(
        long,
        value_enum,
        value_name = "FRAMING",
        conflicts_with_all = ["hex", "format", "meta", "truncate"]
    )]
    raw: Option<Raw>,
    /// Print every sample in hex (0x…), text or not, whatever its label.
    #[arg(long, conflicts_with = "format")]
    hex: bool,
    /// Print at most N bytes of each sample (of its indented form with --format), then
    /// how many were left out; 0 prints everything. Default 1024.
    #[arg(long, value_name = "N")]
    truncate: Option<usize>,
    /// Put each sample's sequence number, source time, writer and size before it.
    #[arg(long)]
    meta: bool,
    /// How each sample is printed: by its writer's encoding label (auto), or as the value
    /// says whatever the label (a sample that is not JSON or CBOR is printed as one line,
    /// with a warning).
    #[arg(long, value_enum, default_value_t = Format::Auto)]
    format: Format,
}

/// Prints samples as [`OutputArgs`] say.
#[derive(Debug)]
pub(crate) struct Printer {
    raw: Option<Raw>,
    hex: bool,
    limit: usize,
    meta: bool,
    format: Format,
    /// Whether a sample that is not JSON (or CBOR) was warned about.
    warned: bool,
}

impl Printer {
    pub(crate) fn new(a: &OutputArgs) -> Printer {
        Printer {
            raw: a.raw,
            hex: a.hex,
            limit: a.truncate.unwrap_or(DEFAULT_TRUNCATE),
            meta: a.meta,
            format: a.format,
            warned: false,
        }
    }

    /// Writes `s` to `w` and flushes it; `label` is what its writer announced its payloads
    /// are (`pub --encoding`).
    pub(crate) fn write(
        &mut self,
        w: &mut impl Write,
        s: &Sample,
        label: Encoding,
    ) -> io::Result<()> {
        let p = &s.payload[..];
        match self.raw {
            Some(Raw::Lines) => {
                w.write_all(p)?;
                w.write_all(b"\n")?;
                return w.flush();
            }
            Some(Raw::Len) => {
                // max_sample_size is at most u32::MAX (the config refuses more).
                let n = u32::try_from(p.len()).unwrap_or(u32::MAX);
                w.write_all(&n.to_le_bytes())?;
                w.write_all(p)?;
                return w.flush();
            }
            None => {}
        }
        let meta = self.meta.then(|| meta(s, label));
        // What the sample is to be printed as.
        let structured = match (self.format, label) {
            _ if self.hex => None,
            (Format::Json, _) | (Format::Auto, Encoding::Json) => Some(Encoding::Json),
            (Format::Cbor, _) | (Format::Auto, Encoding::Cbor) => Some(Encoding::Cbor),
            _ => None,
        };
        let Some(structured) = structured else {
            let hex = self.hex
                || (self.format == Format::Auto
                    && matches!(label, Encoding::Bytes | Encoding::Cdr));
            let body = if hex {
                hex_line(p, self.limit)
            } else {
                text_line(p, self.limit)
            };
            match meta {
                Some(m) => writeln!(w, "{m} {body}")?,
                None => writeln!(w, "{body}")?,
            }
            return w.flush();
        };
        // JSON text in the sample's own order (a JSON value would sort map keys).
        let parsed = if structured == Encoding::Cbor {
            crate::cbor::decode(p).map_err(|e| e.to_string())
        } else {
            serde_json::from_slice::<serde::de::IgnoredAny>(p)
                .map(|_| String::from_utf8_lossy(p).into_owned())
                .map_err(|e| e.to_string())
        };
        let body = match parsed {
            Ok(json) => pretty_json(&json, self.limit),
            Err(why) => {
                if !self.warned {
                    self.warned = true;
                    let what = if structured == Encoding::Cbor {
                        "CBOR"
                    } else {
                        "JSON"
                    };
                    eprintln!(
                        "warning: sample {} of writer {} is not {what} ({why}): printed as one \
                         line (so are the next ones that are not; --format text prints every \
                         sample so)",
                        s.seq, s.writer
                    );
                }
                text_line(p, self.limit)
            }
        };
        if let Some(m) = meta {
            writeln!(w, "{m}")?;
        }
        writeln!(w, "{body}\n---")?;
        w.flush()
    }
}

/// `--meta`: `[seq 12 | 2025-11-25T14:00:00.123456789Z | writer 5f2e8c1a9b3d4e70.1 | 5
/// bytes | json]` (the label last, when the writer gave one).
fn meta(s: &Sample, label: Encoding) -> String {
    let label = if label == Encoding::Unset {
        String::new()
    } else {
        format!(" | {label}")
    };
    format!(
        "[seq {} | {} | writer {} | {} bytes{label}]",
        s.seq,
        utc_ns(s.timestamp_ns),
        s.writer,
        s.payload.len()
    )
}

/// A sample as one line: printable text as it is, other text as a JSON string, other
/// bytes as `0x` and hex; at most `limit` bytes of it (0: all), then what was left out.
pub(crate) fn text_line(b: &[u8], limit: usize) -> String {
    let shown = if limit > 0 && b.len() > limit {
        &b[..limit]
    } else {
        b
    };
    let (body, used) = match std::str::from_utf8(shown) {
        Ok(s) => (as_text(s), shown.len()),
        // Cut inside a character: the text before it.
        Err(e) if shown.len() < b.len() && e.error_len().is_none() => {
            let s = std::str::from_utf8(&shown[..e.valid_up_to()]).unwrap_or_default();
            (as_text(s), e.valid_up_to())
        }
        Err(_) => (format!("0x{}", tether_crypto::to_hex(shown)), shown.len()),
    };
    body + &marker(b.len(), used, "bytes")
}

/// Every sample in hex after `0x`, at most `limit` bytes of it (0: all).
pub(crate) fn hex_line(b: &[u8], limit: usize) -> String {
    let n = if limit > 0 {
        b.len().min(limit)
    } else {
        b.len()
    };
    format!("0x{}", tether_crypto::to_hex(&b[..n])) + &marker(b.len(), n, "bytes")
}

/// Text as itself when that cannot be misread: no control character but tab, and not
/// starting as a quoted string or hex would; else as a JSON string.
fn as_text(s: &str) -> String {
    let looks_hex = s
        .strip_prefix("0x")
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    let plain =
        !looks_hex && !s.starts_with('"') && !s.chars().any(|c| c.is_control() && c != '\t');
    if plain {
        s.to_string()
    } else {
        serde_json::to_string(s).unwrap_or_default()
    }
}

/// Valid JSON text `json` indented by two spaces, its members in the order given, at
/// most `limit` bytes of it (0: all) then what was left out. Only what is shown is kept:
/// the rest is counted, not built.
pub(crate) fn pretty_json(json: &str, limit: usize) -> String {
    let mut out = Pretty {
        s: String::new(),
        limit: if limit == 0 { usize::MAX } else { limit },
        total: 0,
    };
    let mut depth = 0usize;
    let (mut in_str, mut escaped) = (false, false);
    let mut chars = json.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push(c);
            }
            '{' | '[' => {
                out.push(c);
                while chars.peek().is_some_and(|c| c.is_ascii_whitespace()) {
                    chars.next();
                }
                // An empty object or array stays on its line.
                if let Some(&close @ ('}' | ']')) = chars.peek() {
                    chars.next();
                    out.push(close);
                } else {
                    depth += 1;
                    out.newline(depth);
                }
            }
            '}' | ']' => {
                depth = depth.saturating_sub(1);
                out.newline(depth);
                out.push(c);
            }
            ',' => {
                out.push(c);
                out.newline(depth);
            }
            ':' => {
                out.push(':');
                out.push(' ');
            }
            c if c.is_ascii_whitespace() => {}
            c => out.push(c),
        }
    }
    let (shown, total) = (out.s.len(), out.total);
    out.s + &marker(total, shown, "bytes of output")
}

/// The output of [`pretty_json`]: what fits in `limit`, and the length of the whole.
struct Pretty {
    s: String,
    limit: usize,
    total: usize,
}

impl Pretty {
    fn push(&mut self, c: char) {
        self.total += c.len_utf8();
        // Once one character did not fit, none after it is shown either.
        if self.s.len() + c.len_utf8() <= self.limit && self.s.len() + c.len_utf8() == self.total {
            self.s.push(c);
        }
    }

    fn newline(&mut self, depth: usize) {
        self.push('\n');
        for _ in 0..depth {
            self.push(' ');
            self.push(' ');
        }
    }
}

/// ` … [N of M bytes not shown; --truncate 0 shows all]`, or nothing when all was shown.
fn marker(total: usize, shown: usize, what: &str) -> String {
    if shown >= total {
        return String::new();
    }
    format!(
        " … [{} of {total} {what} not shown; --truncate 0 shows all]",
        total - shown
    )
}

/// Nanoseconds since the UNIX epoch as RFC 3339 UTC: `2025-11-25T14:00:00.123456789Z`.
pub(crate) fn utc_ns(ns: u64) -> String {
    let (secs, nanos) = (ns / 1_000_000_000, ns % 1_000_000_000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days to a civil date (H. Hinnant's algorithm), for days ≥ 0.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{nanos:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_tell_text_quoted_and_hex_apart() {
        assert_eq!(text_line(b"hello world", 0), "hello world");
        assert_eq!(text_line(b"tab\there", 0), "tab\there");
        assert_eq!(text_line(b"two\nlines", 0), "\"two\\nlines\"");
        assert_eq!(text_line(b"hello\n", 0), "\"hello\\n\"");
        assert_eq!(text_line(b"\"quoted\"", 0), "\"\\\"quoted\\\"\"");
        assert_eq!(text_line(b"0xbeef", 0), "\"0xbeef\"");
        assert_eq!(text_line(b"0xcafe and more", 0), "0xcafe and more");
        assert_eq!(text_line(b"\x1b[2J", 0), "\"\\u001b[2J\"");
        assert_eq!(text_line(&[0, 1, 0xff], 0), "0x0001ff");
        assert_eq!(text_line(b"", 0), "");
        assert_eq!(hex_line(b"hi", 0), "0x6869");
    }

    #[test]
    fn long_samples_are_cut_with_a_marker() {
        let big = vec![b'a'; 5_000_000];
        let l = text_line(&big, DEFAULT_TRUNCATE);
        assert!(l.starts_with(&"a".repeat(1024)), "{}", &l[..40]);
        assert!(
            l.ends_with(" … [4998976 of 5000000 bytes not shown; --truncate 0 shows all]"),
            "{}",
            &l[1000..]
        );
        assert_eq!(text_line(&big, 0).len(), 5_000_000);
        // Cut inside a character: the text before it, not hex.
        let l = text_line("é".repeat(10).as_bytes(), 3);
        assert!(l.starts_with("é …"), "{l}");
        assert!(l.contains("[18 of 20 bytes"), "{l}");
        let l = hex_line(&[7; 10], 4);
        assert!(l.starts_with("0x07070707 … [6 of 10 bytes"), "{l}");
    }

    #[test]
    fn json_is_indented_in_its_own_order() {
        assert_eq!(
            pretty_json(r#" {"z": [1, {}, []], "a":{"s":"x, \"y\": [z]"}} "#, 0),
            "{\n  \"z\": [\n    1,\n    {},\n    []\n  ],\n  \"a\": {\n    \"s\": \"x, \\\"y\\\": [z]\"\n  }\n}"
        );
        assert_eq!(pretty_json("3.10", 0), "3.10");
        // Cut: what fits, and how much more there was.
        assert_eq!(
            pretty_json(r#"{"a":1}"#, 6),
            "{\n  \"a … [6 of 12 bytes of output not shown; --truncate 0 shows all]"
        );
        // A character that does not fit is not split, nor is anything after it shown.
        assert_eq!(
            pretty_json(r#"["é"]"#, 6),
            "[\n  \" … [5 of 10 bytes of output not shown; --truncate 0 shows all]"
        );
    }

    #[test]
    fn hex_input_is_what_hex_output_prints() {
        assert_eq!(parse_hex("0x48656c6c6f").unwrap(), b"Hello");
        assert_eq!(parse_hex("48 65 6C 6c 6f").unwrap(), b"Hello");
        assert_eq!(parse_hex("").unwrap(), b"");
        assert!(parse_hex("4").unwrap_err().to_string().contains("odd"));
        assert!(parse_hex("zz").unwrap_err().to_string().contains("'z'"));
    }

    #[test]
    fn sizes_are_numbers_of_bytes() {
        assert_eq!(size_arg("1000"), Ok(1000));
        assert!(
            size_arg("99999999999999999999999")
                .unwrap_err()
                .contains("more than")
        );
        assert!(size_arg("1k").unwrap_err().contains("not a number"));
    }

    #[test]
    fn times_are_rfc3339_utc() {
        assert_eq!(utc_ns(0), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(
            utc_ns(1_700_000_000_123_456_789),
            "2023-11-14T22:13:20.123456789Z"
        );
        assert_eq!(
            utc_ns(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000000Z"
        );
    }
}
