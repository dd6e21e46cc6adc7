//! A stranger's create body on the E2B front (`POST /sandboxes`, `POST
//! /v2/sandboxes`): the JSON as serde reads it, E2B's create translated
//! into Airlock's (`e2b::control::translate`, both versions), then the
//! server's own checks of the result as an API key's request.
//!
//! Input: the JSON body. Invariants: a refusal of the translation is E2B's
//! 400 naming a field of E2B's create, or its 501 naming what Airlock lacks,
//! never another status or an empty message; a translation never leaves
//! the lifetime unset nor zero, keeps every label and variable it was given,
//! and what it hands on is refused by the server's checks only with a reason.
#![no_main]

use std::sync::Arc;

use airlock_api::reason;
use airlock_fuzz::create_context::fixture;
use airlock_server::fuzzing::check;
use airlock_server::fuzzing::e2b::{translate, NewSandbox, Version};
use airlock_server::Principal;
use http::StatusCode;
use libfuzzer_sys::fuzz_target;

/// The fields of E2B's create, as a 400 names them first.
const FIELDS: &[&str] = &[
    "templateID",
    "timeout",
    "autoPause",
    "autoResume",
    "allow_internet_access",
    "network",
    "metadata",
    "envVars",
];

/// A template the server has (the create's `templateID` may name it).
const TEMPLATES: &[&str] = &["web"];

fn translated(data: &[u8], version: Version) {
    let Ok(new) = serde_json::from_slice::<NewSandbox>(data) else {
        return;
    };
    let labels = new.metadata.clone().unwrap_or_default();
    let envs = new.env_vars.clone().unwrap_or_default();
    let request = match translate(new, TEMPLATES, version) {
        Ok(request) => request,
        Err(failure) => {
            assert!(!failure.message.is_empty(), "an empty refusal");
            match failure.status {
                StatusCode::BAD_REQUEST => {
                    let field = failure
                        .message
                        .split([':', '.', '[', ' '])
                        .next()
                        .unwrap_or_default();
                    assert!(
                        FIELDS.contains(&field),
                        "a 400 naming no field of E2B's create: {:?}",
                        failure.message
                    );
                }
                StatusCode::NOT_IMPLEMENTED => {}
                other => panic!("a refusal with {other}: {:?}", failure.message),
            }
            return;
        }
    };
    assert!(
        request.timeout_secs.is_some_and(|secs| secs > 0),
        "a translated create without a lifetime: {:?}",
        request.timeout_secs
    );
    assert_eq!(request.metadata.len(), labels.len(), "labels lost");
    assert_eq!(request.envs.len(), envs.len(), "variables lost");
    let fixture = fixture();
    if let Err(status) = check(request, &Principal::Key(Arc::from("fuzz")), &fixture.context()) {
        assert!(
            reason::reason_of(&status).is_some(),
            "a refusal without a reason: {status:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    translated(data, Version::V1);
    translated(data, Version::V2);
});
