//! Property tests of the frame decoder: arbitrary bytes never panic it, and every valid
//! request survives encode → decode unchanged.

use lowcon_store::protocol::{Request, Response};
use proptest::prelude::*;

fn key() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..64)
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (key(), key()).prop_map(|(key, value)| Request::Set { key, value }),
        (key(), 0u64..1_000_000).prop_map(|(key, timeout_ms)| Request::Get { key, timeout_ms }),
        (proptest::collection::vec(key(), 0..8), 0u64..1_000_000)
            .prop_map(|(keys, timeout_ms)| Request::Wait { keys, timeout_ms }),
        (key(), any::<i64>()).prop_map(|(key, delta)| Request::Add { key, delta }),
        (key(), key(), key()).prop_map(|(key, expected, new)| Request::CompareSet { key, expected, new }),
        key().prop_map(|key| Request::Delete { key }),
        Just(Request::NumKeys),
        (proptest::collection::vec(key(), 0..8), 0u64..1_000_000)
            .prop_map(|(keys, timeout_ms)| Request::MultiGet { keys, timeout_ms }),
        proptest::collection::vec((key(), key()), 0..8).prop_map(|pairs| Request::MultiSet { pairs }),
        proptest::collection::vec(key(), 0..8).prop_map(|keys| Request::Check { keys }),
        Just(Request::Ping),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Request::decode(&bytes);
        let _ = Response::decode(&bytes);
    }

    #[test]
    fn requests_round_trip(req in request()) {
        prop_assert_eq!(Request::decode(&req.encode()).unwrap(), req);
    }

    #[test]
    fn every_truncation_of_a_valid_request_is_an_error(req in request()) {
        let bytes = req.encode();
        for cut in 0..bytes.len() {
            prop_assert!(Request::decode(&bytes[..cut]).is_err());
        }
    }

    #[test]
    fn mutated_requests_decode_or_fail_cleanly(req in request(), pos in any::<usize>(), byte in any::<u8>()) {
        let mut bytes = req.encode();
        let i = pos % bytes.len();
        bytes[i] = byte;
        let _ = Request::decode(&bytes);
    }
}
