//! Receipts: how `tether recv` tells `tether send` what became of a transfer, and how `send`
//! decides from them whether the file arrived.
//!
//! Each `recv` publishes, on the file topic with `/receipts` appended (`/maps` →
//! `/maps/receipts`), one receipt for every transfer it finishes or abandons; `send` listens
//! there and succeeds only when every receiver it started with has confirmed the file's
//! SHA-256. A receipt is an application payload (integers little-endian):
//!
//! | field | size | |
//! |---|---|---|
//! | magic | 4 | `TFR1` |
//! | transfer id | 16 | the id of the transfer's header |
//! | reader participant | 8 | the receiver's file-topic reader: its participant id |
//! | reader entity | 4 | and its entity id |
//! | outcome | 1 | 0 written; otherwise why not ([`Outcome`]) |
//! | bytes | 8 | bytes of the file written |
//! | SHA-256 | 32 | of those bytes (zero when the outcome is not 0) |
//! | reason length | 2 | at most [`MAX_REASON`] |
//! | reason | length | UTF-8, what went wrong in words (empty when written) |
//!
//! Anything else (another length, a reason that is not UTF-8 or too long) is a bad receipt:
//! counted and ignored with a warning. A receipt is believed only from the participant it
//! speaks for (the writer of the receipt sample must belong to the reader's participant; in
//! a secure realm that identity is authenticated), so one receiver cannot confirm, or fail,
//! a transfer for another.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use tether::{Guid, Publisher, Qos, Sample, Session, Subscriber};

const MAGIC: &[u8; 4] = b"TFR1";
/// Longest reason a receipt carries (longer ones are cut at a character boundary).
pub(crate) const MAX_REASON: usize = 1024;
/// Bytes of a receipt before its reason.
const FIXED: usize = 4 + 16 + 8 + 4 + 1 + 8 + 32 + 2;
/// How long `recv` waits, before it exits, for its last receipts to be acknowledged.
const LINGER: Duration = Duration::from_secs(5);

/// The topic receipts for transfers on `topic` travel on.
pub(crate) fn topic(topic: &str) -> String {
    format!("{}/receipts", topic.trim_end_matches('/'))
}

/// The receipt writers' QoS: reliable; transient-local, so that a sender whose reader
/// matched late still gets the receipts of the last few transfers.
fn writer_qos() -> Qos {
    Qos::default().keep_last(32).transient_local()
}

/// The receipt reader's: keep-all, so that a burst of receipts from many receivers between
/// two looks is never cut to the last few.
fn reader_qos() -> Qos {
    Qos::default().keep_all().transient_local()
}

/// What became of a transfer at one receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// The file is written, flushed to disk and in place.
    Written,
    /// No space left on the receiver's disk (or its quota is used up).
    DiskFull,
    /// The receiver may not write there (permissions, read-only file system).
    PermissionDenied,
    /// Another I/O error.
    IoError,
    /// The bytes received do not have the SHA-256 the sender stated.
    ChecksumMismatch,
    /// The bytes received are not the file: a chunk out of place, a length that differs.
    Incomplete,
    /// The receiver was stopped by a signal (SIGINT, SIGTERM).
    Interrupted,
    /// Another transfer began on the topic before this one ended.
    Superseded,
    /// The receiver refused the transfer (an unsafe file name, a malformed header).
    Refused,
    /// The receiver gave up waiting for the rest (its `--timeout`).
    TimedOut,
    /// A failure this version does not know by code (a newer receiver's).
    Other(u8),
}

impl Outcome {
    fn code(self) -> u8 {
        match self {
            Outcome::Written => 0,
            Outcome::DiskFull => 1,
            Outcome::PermissionDenied => 2,
            Outcome::IoError => 3,
            Outcome::ChecksumMismatch => 4,
            Outcome::Incomplete => 5,
            Outcome::Interrupted => 6,
            Outcome::Superseded => 7,
            Outcome::Refused => 8,
            Outcome::TimedOut => 9,
            Outcome::Other(c) => c,
        }
    }

    fn from_code(c: u8) -> Outcome {
        match c {
            0 => Outcome::Written,
            1 => Outcome::DiskFull,
            2 => Outcome::PermissionDenied,
            3 => Outcome::IoError,
            4 => Outcome::ChecksumMismatch,
            5 => Outcome::Incomplete,
            6 => Outcome::Interrupted,
            7 => Outcome::Superseded,
            8 => Outcome::Refused,
            9 => Outcome::TimedOut,
            c => Outcome::Other(c),
        }
    }

    /// In words, as `send` reports it.
    pub(crate) fn label(self) -> String {
        match self {
            Outcome::Written => "written".into(),
            Outcome::DiskFull => "disk full".into(),
            Outcome::PermissionDenied => "permission denied".into(),
            Outcome::IoError => "I/O error".into(),
            Outcome::ChecksumMismatch => "checksum mismatch".into(),
            Outcome::Incomplete => "incomplete".into(),
            Outcome::Interrupted => "interrupted".into(),
            Outcome::Superseded => "superseded by another transfer".into(),
            Outcome::Refused => "refused".into(),
            Outcome::TimedOut => "timed out".into(),
            Outcome::Other(c) => format!("failed (outcome {c})"),
        }
    }

    /// The outcome an I/O error stands for: a full disk and a refusal to write are told
    /// apart from the rest.
    pub(crate) fn of_io(e: &std::io::Error) -> Outcome {
        use std::io::ErrorKind as K;
        match e.kind() {
            K::StorageFull | K::QuotaExceeded => Outcome::DiskFull,
            K::PermissionDenied | K::ReadOnlyFilesystem => Outcome::PermissionDenied,
            _ => Outcome::IoError,
        }
    }
}

/// One receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Receipt {
    /// The transfer.
    pub(crate) id: [u8; 16],
    /// The receiver's file-topic reader: participant id and entity id.
    pub(crate) reader: (u64, u32),
    pub(crate) outcome: Outcome,
    /// Bytes written.
    pub(crate) bytes: u64,
    /// SHA-256 of the bytes written (zero unless written).
    pub(crate) sha256: [u8; 32],
    /// What went wrong, in words.
    pub(crate) reason: String,
}

/// Why bytes are not a receipt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BadReceipt {
    /// Not `TFR1`: not a receipt at all.
    Magic,
    /// The length does not fit the layout.
    Length(usize),
    /// The reason is longer than [`MAX_REASON`].
    ReasonTooLong(usize),
    /// The reason is not UTF-8.
    NotUtf8,
}

impl std::fmt::Display for BadReceipt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BadReceipt::Magic => write!(f, "not a receipt"),
            BadReceipt::Length(n) => write!(f, "{n} bytes do not fit the receipt layout"),
            BadReceipt::ReasonTooLong(n) => {
                write!(f, "a {n}-byte reason (at most {MAX_REASON})")
            }
            BadReceipt::NotUtf8 => write!(f, "a reason that is not UTF-8"),
        }
    }
}

impl Receipt {
    pub(crate) fn encode(&self) -> Bytes {
        let mut cut = self.reason.len().min(MAX_REASON);
        while !self.reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let reason = &self.reason.as_bytes()[..cut];
        let mut b = BytesMut::with_capacity(FIXED + reason.len());
        b.put_slice(MAGIC);
        b.put_slice(&self.id);
        b.put_u64_le(self.reader.0);
        b.put_u32_le(self.reader.1);
        b.put_u8(self.outcome.code());
        b.put_u64_le(self.bytes);
        b.put_slice(&self.sha256);
        b.put_u16_le(reason.len() as u16);
        b.put_slice(reason);
        b.freeze()
    }

    pub(crate) fn decode(p: &[u8]) -> Result<Receipt, BadReceipt> {
        if p.len() < 4 || &p[..4] != MAGIC {
            return Err(BadReceipt::Magic);
        }
        if p.len() < FIXED {
            return Err(BadReceipt::Length(p.len()));
        }
        let le64 = |at: usize| u64::from_le_bytes(p[at..at + 8].try_into().unwrap_or_default());
        let mut id = [0u8; 16];
        id.copy_from_slice(&p[4..20]);
        let participant = le64(20);
        let entity = u32::from_le_bytes(p[28..32].try_into().unwrap_or_default());
        let outcome = Outcome::from_code(p[32]);
        let bytes = le64(33);
        let mut sha256 = [0u8; 32];
        sha256.copy_from_slice(&p[41..73]);
        let n = usize::from(u16::from_le_bytes([p[73], p[74]]));
        if n > MAX_REASON {
            return Err(BadReceipt::ReasonTooLong(n));
        }
        if p.len() != FIXED + n {
            return Err(BadReceipt::Length(p.len()));
        }
        let reason = std::str::from_utf8(&p[FIXED..])
            .map_err(|_| BadReceipt::NotUtf8)?
            // It ends up on the sender's terminal: no control characters.
            .chars()
            .map(|c| if c.is_control() { '\u{fffd}' } else { c })
            .collect();
        Ok(Receipt {
            id,
            reader: (participant, entity),
            outcome,
            bytes,
            sha256,
            reason,
        })
    }
}

/// `recv`'s side: publishes a receipt for each transfer it ends.
pub(crate) struct Confirmations {
    publisher: Publisher,
    /// Our file-topic reader, the identity the receipts speak for.
    reader: Guid,
    /// Whether anything was published (and so is worth waiting for at exit).
    sent: bool,
}

/// The receipt writer `recv` opens for `file_topic`. Open it before the file-topic reader: a
/// sender then finds it in the same announcement as the reader it speaks for.
pub(crate) fn publisher(session: &Session, file_topic: &str) -> anyhow::Result<Publisher> {
    let t = topic(file_topic);
    session.publisher(t.as_str(), writer_qos()).map_err(|e| {
        anyhow::anyhow!("recv confirms each file to its sender on {t}, and cannot: {e}")
    })
}

impl Confirmations {
    /// Receipts through `publisher` (from [`publisher`]) that speak for `reader`.
    pub(crate) fn new(publisher: Publisher, reader: Guid) -> Confirmations {
        Confirmations {
            publisher,
            reader,
            sent: false,
        }
    }

    /// Publishes a receipt; a failure to publish it is only a warning (the sender then
    /// sees no receipt, and fails anyway).
    pub(crate) fn send(
        &mut self,
        id: &[u8; 16],
        outcome: Outcome,
        bytes: u64,
        sha256: [u8; 32],
        reason: &str,
    ) {
        let r = Receipt {
            id: *id,
            reader: (self.reader.participant.0, self.reader.entity.0),
            outcome,
            bytes,
            sha256,
            reason: reason.to_string(),
        };
        match self.publisher.put(r.encode()) {
            Ok(_) => self.sent = true,
            Err(e) => eprintln!("warning: cannot send the receipt: {e}"),
        }
    }

    /// Before exiting: waits (up to 5 s) until the senders have the receipts.
    pub(crate) fn settle(&self) {
        if self.sent && !self.publisher.wait_for_acknowledgments(LINGER) {
            eprintln!(
                "warning: a sender did not acknowledge its receipt within {} s",
                LINGER.as_secs()
            );
        }
    }
}

/// The receipt reader `send` opens (before its file writer, so that it is matched with a
/// receiver's receipt writer by the time the receiver can have anything to confirm).
pub(crate) fn subscriber(session: &Session, file_topic: &str) -> anyhow::Result<Subscriber> {
    let t = topic(file_topic);
    session.subscriber(t.as_str(), reader_qos()).map_err(|e| {
        anyhow::anyhow!("send learns from the receivers' receipts on {t} whether they have the file, and cannot: {e}")
    })
}

/// Where one receiver stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// No receipt yet.
    Pending,
    /// It says it wrote this many bytes with this SHA-256.
    Written { bytes: u64, sha256: [u8; 32] },
    /// It failed, or left, or stopped: why, in words.
    Failed(String),
}

/// A receiver `send` started with.
#[derive(Debug)]
struct Receiver {
    guid: Guid,
    name: String,
    state: State,
}

/// `send`'s side: the receivers matched when sending began, and what each has said.
#[derive(Debug)]
pub(crate) struct Tally {
    id: [u8; 16],
    receivers: Vec<Receiver>,
    /// Bad receipts ignored (malformed, or from a participant they do not speak for).
    bad: u64,
}

impl Tally {
    /// The readers `publisher` is matched with now, named by their participants (in a
    /// secure realm, by the names their credentials certify).
    pub(crate) fn start(session: &Session, publisher: &Publisher, id: [u8; 16]) -> Tally {
        let names = session.participants();
        let me = session.id();
        let receivers = publisher
            .matched_readers()
            .into_iter()
            .map(|guid| {
                let name = if guid.participant == me {
                    "(this session)".to_string()
                } else if let Some(n) = session.certified_name(guid.participant) {
                    n
                } else {
                    names
                        .iter()
                        .find(|(p, ..)| *p == guid.participant)
                        .filter(|(_, n, _)| !n.is_empty())
                        .map_or_else(|| "?".to_string(), |(_, n, _)| n.clone())
                };
                Receiver {
                    guid,
                    name,
                    state: State::Pending,
                }
            })
            .collect();
        Tally {
            id,
            receivers,
            bad: 0,
        }
    }

    /// How many receivers it started with.
    pub(crate) fn len(&self) -> usize {
        self.receivers.len()
    }

    /// Receivers that have said nothing yet and are still there.
    pub(crate) fn pending(&self) -> usize {
        self.receivers
            .iter()
            .filter(|r| r.state == State::Pending)
            .count()
    }

    /// True if any receiver has failed or left.
    pub(crate) fn any_failed(&self) -> bool {
        self.receivers
            .iter()
            .any(|r| matches!(r.state, State::Failed(_)))
    }

    /// Takes the receipts that have arrived; true if one concerned a receiver of ours.
    fn take(&mut self, sub: &Subscriber) -> bool {
        let mut news = false;
        while let Some(s) = sub.try_recv() {
            news |= self.apply(&s);
        }
        news
    }

    /// One receipt sample; true if it settled a receiver of ours.
    fn apply(&mut self, s: &Sample) -> bool {
        let r = match Receipt::decode(&s.payload) {
            Ok(r) => r,
            Err(e) => {
                self.bad += 1;
                eprintln!("warning: bad receipt from {} ignored: {e}", s.writer);
                return false;
            }
        };
        if r.id != self.id {
            return false; // another transfer's
        }
        if r.reader.0 != s.writer.participant.0 {
            self.bad += 1;
            eprintln!(
                "warning: receipt from {} for a reader of another participant ({:016x}) ignored",
                s.writer, r.reader.0
            );
            return false;
        }
        let Some(rx) = self.receivers.iter_mut().find(|x| {
            x.guid.participant.0 == r.reader.0
                && x.guid.entity.0 == r.reader.1
                && x.state == State::Pending
        }) else {
            return false; // a receiver we did not start with, or a second word from one
        };
        rx.state = match r.outcome {
            Outcome::Written => State::Written {
                bytes: r.bytes,
                sha256: r.sha256,
            },
            o if r.reason.is_empty() => State::Failed(o.label()),
            o => State::Failed(format!("{}: {}", o.label(), r.reason)),
        };
        true
    }

    /// Takes the receipts that have arrived and marks the receivers that left before
    /// sending one. True if anything changed.
    pub(crate) fn poll(&mut self, sub: &Subscriber, publisher: &Publisher) -> bool {
        let mut news = self.take(sub);
        let matched = publisher.matched_readers();
        if self
            .receivers
            .iter()
            .any(|r| r.state == State::Pending && !matched.contains(&r.guid))
        {
            // A receiver's last receipt is acknowledged before it says goodbye: take what
            // arrived before the departure was seen, then believe the departure.
            news |= self.take(sub);
            for r in &mut self.receivers {
                if r.state == State::Pending && !matched.contains(&r.guid) {
                    r.state = State::Failed("left before confirming".into());
                    news = true;
                }
            }
        }
        news
    }

    /// Gives up on the receivers still pending, with `why` (given each one's samples still
    /// unacknowledged).
    pub(crate) fn give_up(&mut self, publisher: &Publisher, why: impl Fn(u64) -> String) {
        let owed = publisher.unacknowledged();
        for r in &mut self.receivers {
            if r.state == State::Pending {
                let n = owed
                    .iter()
                    .filter(|s| s.reader == r.guid)
                    .map(|s| s.samples)
                    .fold(0, u64::saturating_add);
                r.state = State::Failed(why(n));
            }
        }
    }

    /// Samples the pending receivers have yet to acknowledge (for telling progress).
    pub(crate) fn outstanding(&self, publisher: &Publisher) -> u64 {
        publisher
            .unacknowledged()
            .iter()
            .filter(|s| {
                self.receivers
                    .iter()
                    .any(|r| r.guid == s.reader && r.state == State::Pending)
            })
            .map(|s| s.samples)
            .fold(0, u64::saturating_add)
    }

    /// One line per receiver that did not confirm `size` bytes with SHA-256 `sum` (empty if
    /// all did).
    pub(crate) fn failures(&self, file: &str, size: u64, sum: &[u8]) -> Vec<String> {
        let mut v = Vec::new();
        for r in &self.receivers {
            let why = match &r.state {
                State::Written { bytes, sha256 } if *bytes == size && sha256[..] == *sum => {
                    continue;
                }
                State::Written { bytes, sha256 } => format!(
                    "checksum mismatch: confirmed {bytes} bytes with sha256 {}, not {size} with {}",
                    crate::file::hex(sha256),
                    crate::file::hex(sum)
                ),
                State::Failed(why) => why.clone(),
                State::Pending => "did not confirm".into(),
            };
            v.push(format!(
                "receiver {} ({}) did not confirm {file}: {why}",
                r.name, r.guid
            ));
        }
        v
    }

    /// Bad receipts ignored (each was warned about).
    pub(crate) fn bad(&self) -> u64 {
        self.bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Receipt {
        Receipt {
            id: [7; 16],
            reader: (0x1122_3344_5566_7788, 3),
            outcome: Outcome::DiskFull,
            bytes: 1_048_576,
            sha256: [0; 32],
            reason: "cannot write scan.bin to /data: No space left on device".into(),
        }
    }

    #[test]
    fn receipts_round_trip() {
        for outcome in (0..=12).map(Outcome::from_code) {
            let mut r = sample();
            r.outcome = outcome;
            if outcome == Outcome::Written {
                r.sha256 = [0xab; 32];
                r.reason.clear();
            }
            let b = r.encode();
            assert_eq!(Receipt::decode(&b), Ok(r.clone()));
            assert_eq!(Outcome::from_code(outcome.code()), outcome);
        }
        assert_eq!(Outcome::from_code(12).label(), "failed (outcome 12)");
    }

    #[test]
    fn long_reasons_are_cut_at_a_character() {
        let mut r = sample();
        r.reason = "é".repeat(MAX_REASON); // 2 bytes each
        let d = Receipt::decode(&r.encode()).unwrap();
        assert_eq!(d.reason, "é".repeat(MAX_REASON / 2));
    }

    #[test]
    fn bad_receipts_are_refused() {
        let good = sample().encode();
        assert_eq!(Receipt::decode(b"TFH1xxxx"), Err(BadReceipt::Magic));
        assert_eq!(Receipt::decode(b""), Err(BadReceipt::Magic));
        assert_eq!(
            Receipt::decode(&good[..FIXED - 1]),
            Err(BadReceipt::Length(FIXED - 1))
        );
        // Every truncation and one byte too many.
        for n in 4..good.len() {
            assert!(Receipt::decode(&good[..n]).is_err(), "{n}");
        }
        let mut long = good.to_vec();
        long.push(b'x');
        assert_eq!(
            Receipt::decode(&long),
            Err(BadReceipt::Length(good.len() + 1))
        );
        let mut huge = good[..FIXED].to_vec();
        huge[73..75].copy_from_slice(&2000u16.to_le_bytes());
        huge.resize(FIXED + 2000, b'a');
        assert_eq!(Receipt::decode(&huge), Err(BadReceipt::ReasonTooLong(2000)));
        let mut r = sample();
        r.reason = "ab".into();
        let mut bad = r.encode().to_vec();
        bad[FIXED] = 0xff;
        assert_eq!(Receipt::decode(&bad), Err(BadReceipt::NotUtf8));
    }

    #[test]
    fn control_characters_never_reach_the_terminal() {
        let mut r = sample();
        r.reason = "a\u{1b}[2Jb\n".into();
        assert_eq!(
            Receipt::decode(&r.encode()).unwrap().reason,
            "a\u{fffd}[2Jb\u{fffd}"
        );
    }

    #[test]
    fn io_errors_are_told_apart() {
        use std::io::{Error, ErrorKind};
        let full = Error::from(ErrorKind::StorageFull);
        assert_eq!(Outcome::of_io(&full), Outcome::DiskFull);
        assert_eq!(
            Outcome::of_io(&Error::from_raw_os_error(28)), // ENOSPC
            Outcome::DiskFull
        );
        assert_eq!(
            Outcome::of_io(&Error::from_raw_os_error(13)), // EACCES
            Outcome::PermissionDenied
        );
        assert_eq!(
            Outcome::of_io(&Error::from(ErrorKind::BrokenPipe)),
            Outcome::IoError
        );
    }

    #[test]
    fn topic_names() {
        assert_eq!(topic("/maps"), "/maps/receipts");
        assert_eq!(topic("/maps/"), "/maps/receipts");
    }
}
