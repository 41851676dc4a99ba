use core::fmt;

/// Why a datagram or submessage was rejected. Every variant is the peer's fault: a receiver
/// drops the datagram and counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// Fewer bytes than the header or a declared length needs.
    Truncated,
    /// The first four bytes are not `TTHR`.
    BadMagic,
    /// A version this implementation does not speak.
    UnsupportedVersion(u8),
    /// A length or count field disagrees with the bytes present or exceeds a limit.
    BadLength,
    /// A field holds a value outside its range; the string names the field.
    BadValue(&'static str),
    /// A string field is not UTF-8.
    BadUtf8,
    /// The body is too long for one submessage (only when emitting).
    TooLong,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated => f.write_str("datagram truncated"),
            Error::BadMagic => f.write_str("not a tether datagram (bad magic)"),
            Error::UnsupportedVersion(v) => write!(f, "unsupported wire version {v}"),
            Error::BadLength => f.write_str("length or count field out of bounds"),
            Error::BadValue(field) => write!(f, "invalid value in field `{field}`"),
            Error::BadUtf8 => f.write_str("string field is not UTF-8"),
            Error::TooLong => f.write_str("submessage body longer than 65535 bytes"),
        }
    }
}

impl std::error::Error for Error {}
