//! A template read back from disk (`template::TemplateStore`): `find`,
//! `list` and `collect` on a template directory whose `meta.json`, state
//! file and memory file come from the input.
//!
//! Input: see `airlock_fuzz::template_input` (`@KEY@` and `@SHA@` in the
//! JSON stand for the key and the state's checksum).
//!
//! Invariants: a template is found only when its meta names its key and
//! its files match their recorded sizes and checksum; otherwise `find` is
//! a `Corrupt` error naming the key; `list` agrees with `find`; `collect`
//! removes it exactly when it is not current, and nothing outside the store.
#![no_main]

use std::fs::File;
use std::path::Path;

use airlock::template::{TemplateError, TemplateStore};
use airlock_fuzz::template_input::KEY;
use airlock_fuzz::{replace, Input};
use libfuzzer_sys::fuzz_target;
use sha2::{Digest, Sha256};

fuzz_target!(|data: &[u8]| {
    let mut input = Input::new(data);
    let memory_bytes = u64::from(input.u16()) * 4096;
    let state = input.field();
    let sha: String = Sha256::digest(state)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let json = replace(input.rest(), b"@KEY@", KEY.as_bytes());
    let json = replace(&json, b"@SHA@", sha.as_bytes());

    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let root = tempfile::tempdir_in(base).expect("a scratch directory");
    let dir = root.path().join("templates");
    let template = dir.join(KEY);
    std::fs::create_dir_all(&template).expect("template dir");
    std::fs::write(root.path().join("beside"), b"beside").expect("beside");
    File::create(template.join("memory"))
        .and_then(|f| f.set_len(memory_bytes))
        .expect("memory");
    std::fs::write(template.join("state"), state).expect("state");
    std::fs::write(template.join("meta.json"), &json).expect("meta");

    let store = TemplateStore::new(&dir);
    let found = match store.find(KEY) {
        Ok(Some(found)) => {
            let meta = found.meta();
            assert_eq!(found.key(), KEY);
            assert_eq!(meta.key, KEY);
            assert_eq!(meta.memory_bytes, memory_bytes);
            assert_eq!(meta.state_bytes, state.len() as u64);
            assert_eq!(meta.state_sha256, sha);
            assert_eq!(found.memory_path(), template.join("memory"));
            true
        }
        Ok(None) => panic!("a template directory that exists was not found"),
        Err(TemplateError::Corrupt { key, reason }) => {
            assert_eq!(key, KEY);
            assert!(!reason.is_empty());
            false
        }
        Err(other) => panic!("not a clear refusal: {other}"),
    };

    let listed = store.list().expect("list");
    let [entry] = &listed[..] else {
        panic!("{} entries listed for one template", listed.len())
    };
    assert_eq!(entry.key, KEY);
    assert_eq!(entry.meta.is_some(), found, "list and find disagree");
    assert!(!entry.current || found);

    let gc = store.collect().expect("collect");
    assert_eq!(
        gc.templates.is_empty(),
        entry.current,
        "collect and list disagree"
    );
    assert_eq!(template.exists(), entry.current);
    assert_eq!(
        std::fs::read(root.path().join("beside")).ok().as_deref(),
        Some(&b"beside"[..])
    );
});
