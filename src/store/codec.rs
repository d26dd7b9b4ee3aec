//! How a record (or an inbound's document) is written by the backends that keep it outside the process
//! (redb, Redis): a small header (format version, when it was last touched, whether the conversation waits
//! on its user) that a backend can read without decoding the rest, then the value as JSON.
//!
//! A value of a version this proxy does not read, or one that does not decode, is logged and treated as
//! absent: the conversation starts afresh rather than the proxy failing.

use serde::de::DeserializeOwned;
use serde::Serialize;

/// The format written. When it changes, the version before it stays in [`READABLE`], so that an upgrade
/// keeps the conversations (and the paused runs) of the version it replaces.
const VERSION: u8 = 1;
/// The formats read back: the current one and, once there is one, the one before it.
const READABLE: std::ops::RangeInclusive<u8> = 1..=VERSION;

const HEADER: usize = 1 + 8 + 1;

/// What a backend reads of a record without decoding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    /// Microseconds since the Unix epoch.
    pub touched: u64,
    /// The record has pending interrupts: it is never evicted to make room.
    pub paused: bool,
}

/// `value`'s bytes as stored: a record with its pause, a document (never paused: it holds no tenant's
/// quota).
pub(super) fn encode<T: Serialize>(value: &T, touched: u64, paused: bool) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(HEADER + 256);
    bytes.push(VERSION);
    bytes.extend_from_slice(&touched.to_le_bytes());
    bytes.push(u8::from(paused));
    // Records and documents are plain data with string keys: they always serialize.
    if let Err(error) = serde_json::to_writer(&mut bytes, value) {
        tracing::error!("a stored value cannot be written: {error}");
    }
    bytes
}

/// The header of a stored value; `None` for bytes of a format this proxy does not read.
pub(super) fn header(bytes: &[u8]) -> Option<Header> {
    let (&version, rest) = bytes.split_first()?;
    if !READABLE.contains(&version) || rest.len() < HEADER - 1 {
        return None;
    }
    let touched = u64::from_le_bytes(rest[..8].try_into().ok()?);
    Some(Header {
        touched,
        paused: rest[8] != 0,
    })
}

/// The stored value; `None` (logged) when the bytes are not one this proxy reads.
pub(super) fn decode<T: DeserializeOwned>(bytes: &[u8], what: &dyn std::fmt::Display) -> Option<T> {
    let Some(_) = header(bytes) else {
        tracing::warn!(
            version = bytes.first(),
            "the stored {what} is of a format this version does not read; starting afresh"
        );
        return None;
    };
    match serde_json::from_slice(&bytes[HEADER..]) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!("the stored {what} does not decode ({error}); starting afresh");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Record;

    #[test]
    fn a_record_reads_back_with_its_header() {
        let mut record = Record::default();
        record.pending_calls.push("call-1".into());
        record.pending_interrupts.push(crate::model::Interrupt {
            id: "i-1".into(),
            kind: crate::model::InterruptKind::Question {
                text: "Which city?".into(),
                options: vec![],
            },
        });
        let bytes = encode(&record, 1_700_000_000_123_456, true);
        assert_eq!(
            header(&bytes),
            Some(Header {
                touched: 1_700_000_000_123_456,
                paused: true
            })
        );
        assert_eq!(decode::<Record>(&bytes, &"c"), Some(record));
    }

    #[test]
    fn a_record_of_another_format_or_corrupt_reads_as_absent() {
        let mut newer = encode(&Record::default(), 1, false);
        newer[0] = VERSION + 1;
        assert_eq!(header(&newer), None);
        assert_eq!(decode::<Record>(&newer, &"newer"), None);

        let mut corrupt = encode(&Record::default(), 1, false);
        corrupt.truncate(HEADER + 3);
        assert_eq!(decode::<Record>(&corrupt, &"corrupt"), None);
        assert_eq!(decode::<Record>(&[], &"empty"), None);
        assert_eq!(decode::<Record>(&[VERSION, 1, 2], &"short"), None);
    }
}
