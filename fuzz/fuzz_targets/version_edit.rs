//! Fuzzes `VersionEdit::decode`, `VersionEdit::decode_group` (a manifest
//! record: the edits of several regions) and the CURRENT parser: arbitrary
//! bytes never panic; an error is a `Corruption` naming the given source
//! and offset; what decodes re-encodes to bytes that decode to the same.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tierkv::version::edit::{decode_current, encode_current, VersionEdit};
use tierkv::Error;

fuzz_target!(|data: &[u8]| {
    match VersionEdit::decode(data, "MANIFEST-000001", 4242) {
        Ok(edit) => {
            let mut again = Vec::new();
            edit.encode(&mut again);
            let back =
                VersionEdit::decode(&again, "re-encoded", 0).expect("re-encoded edit decodes");
            assert_eq!(back, edit);
        }
        Err(Error::Corruption { at, .. }) => {
            assert_eq!(at.source, "MANIFEST-000001");
            assert_eq!(at.offset, 4242);
        }
        Err(e) => panic!("decode returned a non-corruption error: {e}"),
    }
    match VersionEdit::decode_group(data, "MANIFEST-000002", 77) {
        Ok(group) => {
            let mut again = Vec::new();
            VersionEdit::encode_group(&group, &mut again);
            let back = VersionEdit::decode_group(&again, "re-encoded", 0)
                .expect("re-encoded group decodes");
            assert_eq!(back, group);
        }
        Err(Error::Corruption { at, .. }) => {
            assert_eq!(at.source, "MANIFEST-000002");
            assert_eq!(at.offset, 77);
        }
        Err(e) => panic!("decode_group returned a non-corruption error: {e}"),
    }
    match decode_current(data, "CURRENT") {
        Ok(n) => assert_eq!(decode_current(&encode_current(n), "CURRENT").ok(), Some(n)),
        Err(e) => assert!(e.is_corruption(), "{e}"),
    }
});
