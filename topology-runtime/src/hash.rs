//! The one hash whose output leaves the process: FNV-1a (64 bits). Version stamps stored on the
//! server and the stream epochs in message ids are derived from it, so it must give the same
//! value on every build and platform, which std's `DefaultHasher` does not promise.

/// FNV-1a over `bytes`: offset basis `0xcbf29ce484222325`, prime `0x100000001b3`.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::fnv1a;

    #[test]
    fn matches_the_published_test_vectors() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
