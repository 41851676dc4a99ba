//! Just enough CBOR (RFC 8949) for `echo` to print a CBOR sample as indented JSON: every
//! major type, definite and indefinite lengths, half, single and double floats. The item
//! becomes JSON text with map entries in the order the sample has them (a JSON value
//! would sort them). What JSON cannot hold is written as CBOR's diagnostic notation would:
//! byte strings as `h'0a0b'`, tags as `{"tag": N, "value": …}`, non-text map keys as
//! their JSON text, NaN and infinities as strings. A payload is one item, nothing after it.

use serde_json::{Number, Value};

/// Why a payload is not one CBOR item.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Malformed(pub(crate) &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

/// Nesting deeper than this is refused (a hostile payload cannot exhaust the stack).
const MAX_DEPTH: usize = 256;

/// The one CBOR item `b` holds, as compact JSON text.
pub(crate) fn decode(b: &[u8]) -> Result<String, Malformed> {
    let mut r = Reader { b, at: 0 };
    let v = r
        .item(0)?
        .ok_or(Malformed("a break where an item was expected"))?;
    if r.at != b.len() {
        return Err(Malformed("bytes after the first item"));
    }
    Ok(v)
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: u64) -> Result<&[u8], Malformed> {
        let left = (self.b.len() - self.at) as u64;
        if n > left {
            return Err(Malformed("truncated"));
        }
        let s = &self.b[self.at..self.at + n as usize];
        self.at += n as usize;
        Ok(s)
    }

    fn uint(&mut self, n: usize) -> Result<u64, Malformed> {
        Ok(self
            .take(n as u64)?
            .iter()
            .fold(0, |a, &x| a << 8 | u64::from(x)))
    }

    /// The argument of an initial byte's low 5 bits; None for indefinite (31).
    fn arg(&mut self, info: u8) -> Result<Option<u64>, Malformed> {
        Ok(Some(match info {
            0..=23 => u64::from(info),
            24 => self.uint(1)?,
            25 => self.uint(2)?,
            26 => self.uint(4)?,
            27 => self.uint(8)?,
            31 => return Ok(None),
            _ => return Err(Malformed("reserved additional information (28-30)")),
        }))
    }

    /// The next item, or None for a break (0xff).
    fn item(&mut self, depth: usize) -> Result<Option<String>, Malformed> {
        if depth > MAX_DEPTH {
            return Err(Malformed("nested too deeply"));
        }
        let ib = self.take(1)?[0];
        let (major, info) = (ib >> 5, ib & 0x1f);
        if ib == 0xff {
            return Ok(None);
        }
        let arg = self.arg(info)?;
        let v = match (major, arg) {
            (0, Some(n)) => n.to_string(),
            (1, Some(n)) => match i64::try_from(n) {
                Ok(n) => (-1 - n).to_string(),
                Err(_) => json(Value::String(format!("-{}", u128::from(n) + 1))),
            },
            (2 | 3, Some(n)) => self.string(major, n)?,
            (2 | 3, None) => {
                let mut parts = Vec::new();
                loop {
                    let ib = self.take(1)?[0];
                    if ib == 0xff {
                        break;
                    }
                    if ib >> 5 != major {
                        return Err(Malformed("a chunk of another type in a string"));
                    }
                    let n = self
                        .arg(ib & 0x1f)?
                        .ok_or(Malformed("an indefinite chunk in a string"))?;
                    parts.push(self.take(n)?.to_vec());
                }
                let all = parts.concat();
                self.bytes_value(major, &all)?
            }
            (4, n) => {
                let mut a = String::from("[");
                let mut i = 0u64;
                while n.is_none_or(|n| i < n) {
                    match self.item(depth + 1)? {
                        Some(v) => {
                            if i > 0 {
                                a.push(',');
                            }
                            a.push_str(&v);
                        }
                        None if n.is_none() => break,
                        None => return Err(Malformed("a break inside a definite array")),
                    }
                    i += 1;
                }
                a + "]"
            }
            (5, n) => {
                let mut m = String::from("{");
                let mut i = 0u64;
                while n.is_none_or(|n| i < n) {
                    let k = match self.item(depth + 1)? {
                        Some(k) => k,
                        None if n.is_none() => break,
                        None => return Err(Malformed("a break inside a definite map")),
                    };
                    let v = self
                        .item(depth + 1)?
                        .ok_or(Malformed("a map key without a value"))?;
                    // A text key is a JSON string already; any other is its JSON text,
                    // as a string.
                    let k = if k.starts_with('"') {
                        k
                    } else {
                        json(Value::String(k))
                    };
                    if i > 0 {
                        m.push(',');
                    }
                    m.push_str(&k);
                    m.push(':');
                    m.push_str(&v);
                    i += 1;
                }
                m + "}"
            }
            (6, Some(tag)) => {
                let v = self
                    .item(depth + 1)?
                    .ok_or(Malformed("a tag without an item"))?;
                format!("{{\"tag\":{tag},\"value\":{v}}}")
            }
            (7, _) => match info {
                20 => "false".into(),
                21 => "true".into(),
                22 | 23 => "null".into(),
                25 => float(half(arg.unwrap_or(0) as u16)),
                26 => float(f64::from(f32::from_bits(arg.unwrap_or(0) as u32))),
                27 => float(f64::from_bits(arg.unwrap_or(0))),
                _ => json(Value::String(format!("simple({})", arg.unwrap_or(0)))),
            },
            _ => return Err(Malformed("an indefinite length where none is allowed")),
        };
        Ok(Some(v))
    }

    fn string(&mut self, major: u8, n: u64) -> Result<String, Malformed> {
        let s = self.take(n)?.to_vec();
        self.bytes_value(major, &s)
    }

    fn bytes_value(&self, major: u8, s: &[u8]) -> Result<String, Malformed> {
        if major == 3 {
            let s = std::str::from_utf8(s).map_err(|_| Malformed("a text string not UTF-8"))?;
            Ok(json(Value::String(s.to_string())))
        } else {
            Ok(json(Value::String(format!(
                "h'{}'",
                tether_crypto::to_hex(s)
            ))))
        }
    }
}

/// A scalar as JSON text.
fn json(v: Value) -> String {
    v.to_string()
}

/// A float as JSON: a number, or its name when JSON has none for it.
fn float(f: f64) -> String {
    json(match Number::from_f64(f) {
        Some(n) => Value::Number(n),
        None if f.is_nan() => Value::String("NaN".into()),
        None if f > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    })
}

/// An IEEE 754 half-precision float (RFC 8949 appendix D).
fn half(h: u16) -> f64 {
    let exp = (h >> 10) & 0x1f;
    let mant = f64::from(h & 0x3ff);
    let v = match exp {
        0 => mant * 2f64.powi(-24),
        31 if mant == 0.0 => f64::INFINITY,
        31 => f64::NAN,
        e => (mant + 1024.0) * 2f64.powi(i32::from(e) - 25),
    };
    if h & 0x8000 != 0 { -v } else { v }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Examples from RFC 8949 appendix A.
    #[test]
    fn rfc_examples() {
        let hex = |s: &str| tether_crypto::from_hex(s).unwrap();
        for (cbor, want) in [
            ("00", json!(0)),
            ("1bffffffffffffffff", json!(u64::MAX)),
            ("3903e7", json!(-1000)),
            ("3bffffffffffffffff", json!("-18446744073709551616")),
            ("f93c00", json!(1.0)),
            ("f97bff", json!(65504.0)),
            ("fa47c35000", json!(100000.0)),
            ("fb3ff199999999999a", json!(1.1)),
            ("f97c00", json!("Infinity")),
            ("f4", json!(false)),
            ("f6", json!(null)),
            ("4401020304", json!("h'01020304'")),
            ("6449455446", json!("IETF")),
            ("83010203", json!([1, 2, 3])),
            ("a26161016162820203", json!({"a": 1, "b": [2, 3]})),
            ("a201020304", json!({"1": 2, "3": 4})),
            ("c11a514b67b0", json!({"tag": 1, "value": 1363896240})),
            ("9f018202039f0405ffff", json!([1, [2, 3], [4, 5]])),
            ("7f657374726561646d696e67ff", json!("streaming")),
            ("bf61610161629f0203ffff", json!({"a": 1, "b": [2, 3]})),
        ] {
            let text = decode(&hex(cbor)).unwrap();
            let got: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(got, want, "{cbor}: {text}");
        }
    }

    /// Map entries keep the sample's order; keys that are not text become strings.
    #[test]
    fn maps_keep_their_order() {
        let hex = |s: &str| tether_crypto::from_hex(s).unwrap();
        // {"z": 1, "a": [true, null], 2: h'01'}
        assert_eq!(
            decode(&hex("a3617a01616182f5f6024101")).unwrap(),
            r#"{"z":1,"a":[true,null],"2":"h'01'"}"#
        );
    }

    #[test]
    fn malformed_input_is_refused() {
        let hex = |s: &str| tether_crypto::from_hex(s).unwrap();
        for bad in [
            "",
            "18",
            "62ff",
            "0000",
            "ff",
            "1c",
            "9b00000000ffffffff",
            "a1",
        ] {
            assert!(decode(&hex(bad)).is_err(), "{bad}");
        }
        // Deep nesting: refused, not a stack overflow.
        assert!(decode(&vec![0x81; 100_000]).is_err());
    }
}
