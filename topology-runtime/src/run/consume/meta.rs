//! A message's delivery metadata ([`MessageMeta`]), read once from its reply subject
//! (`$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<timestamp>.<pending>`,
//! or with `<domain>.<account hash>` before the stream and a token after, ADR-15): a scan of
//! its bytes, on every message, where async-nats' `Message::info` checks UTF-8, splits a string
//! and parses each token (docs/PERFORMANCE.md, "Counted cost").

use async_nats::jetstream;

/// A message's delivery metadata, read once from its reply subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::run) struct MessageMeta {
    /// This delivery's number (1 for the first).
    pub(in crate::run) delivered: u64,
    /// The message's stream sequence (`None` if the reply subject could not be read).
    pub(in crate::run) stream_sequence: Option<u64>,
    /// The delivery's consumer sequence (0 if the reply subject could not be read).
    pub(in crate::run) consumer_sequence: u64,
    /// When the server stored it.
    pub(in crate::run) published: Option<std::time::SystemTime>,
    /// What the consumer had left to deliver after it.
    pub(in crate::run) pending: u64,
}

impl MessageMeta {
    pub(in crate::run) fn of(message: &jetstream::Message) -> Self {
        let unread = MessageMeta {
            delivered: 1,
            stream_sequence: None,
            consumer_sequence: 0,
            published: None,
            pending: 0,
        };
        message
            .reply
            .as_ref()
            .and_then(|reply| parse(reply.as_bytes()))
            .unwrap_or(unread)
    }
}

/// The metadata an ack subject carries; `None` if it is not one.
fn parse(reply: &[u8]) -> Option<MessageMeta> {
    let rest = reply.strip_prefix(b"$JS.ACK.")?;
    // Where each token ends: 7 tokens after the prefix in the original form, 9 or more with
    // the domain and the account hash (those past the ninth are not read). One pass over the
    // bytes; the tokens read are numbers, parsed from their slices.
    let mut ends = [0usize; 9];
    let mut count = 0;
    for (i, &b) in rest.iter().enumerate() {
        if b == b'.' {
            if count < ends.len() {
                ends[count] = i;
            }
            count += 1;
        }
    }
    if count < ends.len() {
        ends[count] = rest.len();
    }
    let first = match count + 1 {
        7 => 2,
        n if n >= 9 => 4,
        _ => return None,
    };
    let token = |i: usize| {
        let i = first + i;
        let start = if i == 0 { 0 } else { ends[i - 1] + 1 };
        number(&rest[start..ends[i]])
    };
    let nanos = token(3)?;
    Some(MessageMeta {
        delivered: token(0)?,
        stream_sequence: Some(token(1)?),
        consumer_sequence: token(2)?,
        published: Some(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(nanos)),
        pending: token(4)?,
    })
}

/// A decimal `u64`: digits only, at least one, no overflow.
fn number(token: &[u8]) -> Option<u64> {
    if token.is_empty() {
        return None;
    }
    // Up to 19 digits cannot overflow: checked only past them.
    let mut n = 0u64;
    for (i, &b) in token.iter().enumerate() {
        let digit = b.wrapping_sub(b'0');
        if digit >= 10 {
            return None;
        }
        n = if i < 19 {
            n * 10 + u64::from(digit)
        } else {
            n.checked_mul(10)?.checked_add(u64::from(digit))?
        };
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_forms_of_the_ack_subject() {
        let v1 = b"$JS.ACK.ORDERS.billing.3.1042.1040.1733300000123456789.17";
        let v2 = b"$JS.ACK._.ACCHASH.ORDERS.billing.3.1042.1040.1733300000123456789.17.xyz";
        for reply in [&v1[..], &v2[..]] {
            let meta = parse(reply).expect("an ack subject");
            assert_eq!(meta.delivered, 3);
            assert_eq!(meta.stream_sequence, Some(1042));
            assert_eq!(meta.consumer_sequence, 1040);
            assert_eq!(meta.pending, 17);
            assert_eq!(
                meta.published,
                Some(
                    std::time::SystemTime::UNIX_EPOCH
                        + std::time::Duration::from_nanos(1_733_300_000_123_456_789)
                )
            );
        }
    }

    #[test]
    fn reads_names_of_every_length() {
        // Dots at every offset within the eight-byte words the scan reads.
        for stream in 1..=17 {
            for consumer in 1..=9 {
                let (s, c) = ("S".repeat(stream), "c".repeat(consumer));
                let v1 = format!("$JS.ACK.{s}.{c}.2.7.5.123.9");
                let v2 = format!("$JS.ACK.hub.HASH.{s}.{c}.2.7.5.123.9.r4nd");
                for reply in [v1, v2] {
                    let meta = parse(reply.as_bytes()).expect("an ack subject");
                    assert_eq!(
                        (meta.delivered, meta.stream_sequence, meta.pending),
                        (2, Some(7), 9),
                        "{reply}"
                    );
                }
            }
        }
    }

    #[test]
    fn refuses_what_is_not_an_ack_subject() {
        for reply in [
            &b"_INBOX.abc"[..],
            b"$JS.ACK.ORDERS.billing.3.1042",
            b"$JS.ACK.ORDERS.billing.x.1042.1040.1.17",
            b"$JS.ACK.ORDERS.billing.3.1042.1040.1.99999999999999999999999",
            b"$JS.ACK.ORDERS.billing.3..1040.1.17",
        ] {
            assert_eq!(parse(reply), None, "{}", String::from_utf8_lossy(reply));
        }
    }
}
