//! A template file in the Dockerfile subset (`TemplateSpec::parse`), the
//! text a user hands `airlock template build -f`.
//!
//! Input: the first byte picks whether a build argument `A=x` is given;
//! the rest is the file (lossily UTF-8).
//!
//! Invariants: parsing never panics; an error names a line of the file (0
//! only for the file as a whole); an accepted file's steps carry lines of
//! the file in increasing order, and READY comes only with START.
#![no_main]

use std::collections::BTreeMap;

use airlock::template::TemplateSpec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let mut args = BTreeMap::new();
    if first & 1 == 1 {
        args.insert("A".to_owned(), "x".to_owned());
    }
    let lines = text.lines().count();
    match TemplateSpec::parse(&text, &args) {
        Err(error) => assert!(error.line <= lines, "{error} in {lines} lines"),
        Ok(spec) => {
            let mut last = 0;
            for step in spec.steps() {
                let line = step.line.expect("a parsed step has a line");
                assert!(line > last && line <= lines, "line {line} after {last}");
                last = line;
            }
            assert!(spec.ready_check().is_none() || spec.start_program().is_some());
        }
    }
});
