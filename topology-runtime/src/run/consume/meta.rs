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
    // The tokens after the prefix: 7 in the original form, 9 or more with the domain and the
    // account hash (the tokens past the ninth are not read).
    let mut tokens: [&[u8]; 9] = [&[]; 9];
    let mut count = 0;
    for token in rest.split(|b| *b == b'.') {
        if count < tokens.len() {
            tokens[count] = token;
        }
        count += 1;
    }
    let first = match count {
        7 => 2,
        n if n >= 9 => 4,
        _ => return None,
    };
    let number = |i: usize| number(tokens[first + i]);
    let nanos = number(3)?;
    Some(MessageMeta {
        delivered: number(0)?,
        stream_sequence: Some(number(1)?),
        published: Some(std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_nanos(nanos)),
        pending: number(4)?,
    })
}

/// A decimal `u64`: digits only, at least one, no overflow.
fn number(token: &[u8]) -> Option<u64> {
    if token.is_empty() {
        return None;
    }
    token.iter().try_fold(0u64, |n, &b| {
        let digit = b.checked_sub(b'0').filter(|d| *d < 10)?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
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
