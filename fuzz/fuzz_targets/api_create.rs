//! A stranger's create request (`airlock.api.v1.Sandboxes/Create`): the
//! message as tonic decodes it off the wire, then the server's checks
//! (`service::create::check`), as an API key and as the owner, against the
//! stores of `src/create_context.rs`: a data directory, empty stores of
//! named templates (the server's and the keys'), an image store holding one
//! image (`default`) and one named snapshot (`web`) of the key's and of the
//! owner's.
//!
//! Input: the protobuf bytes of a `CreateSandboxRequest`. Invariants: a
//! refusal carries a reason, and an `INVALID_ARGUMENT` names a field of the
//! request; an accepted request stays within the limits a client is told
//! (memory, vCPUs, lifetime, rules, labels, roots, workspace size), a key's sandbox always
//! has a lifetime, a key's named workspace is a file in that key's own
//! directory, never elsewhere, and a create from a snapshot is the one
//! named, on its own root, with no image file, template or workspace.
#![no_main]

use std::path::{Component, Path};
use std::sync::Arc;

use airlock_api::limits;
use airlock_api::reason;
use airlock_api::v1::CreateSandboxRequest;
use airlock_fuzz::create_context::{fixture, KEY, SNAPSHOT};
use airlock_server::fuzzing::{check, Create};
use airlock_server::Principal;
use libfuzzer_sys::fuzz_target;
use prost::Message;

/// The fields of `CreateSandboxRequest`, as a refusal names them (a
/// nested one as `idle.policy`).
const FIELDS: &[&str] = &[
    "image",
    "no_image",
    "template",
    "memory_mib",
    "vcpus",
    "timeout_secs",
    "idle",
    "cold",
    "metadata",
    "envs",
    "allow_net",
    "secrets",
    "workspace",
    "ca_certs",
    "public_ports",
    "workspace_size_mib",
    "snapshot",
];

fn checked(request: CreateSandboxRequest, principal: &Principal) {
    let fixture = fixture();
    let request_snapshot = request.snapshot.clone();
    match check(request, principal, &fixture.context()) {
        Ok(create) => accepted(&create, &request_snapshot, principal, &fixture.data_dir),
        Err(status) => {
            assert!(
                reason::reason_of(&status).is_some(),
                "a refusal without a reason: {status:?}"
            );
            if status.code() == airlock::Code::InvalidArgument {
                let field = reason::field_of(&status)
                    .unwrap_or_else(|| panic!("INVALID_ARGUMENT naming no field: {status:?}"));
                let top = field.split('.').next().unwrap_or(field);
                assert!(
                    FIELDS.contains(&top),
                    "names no field of the request: {field}"
                );
            }
        }
    }
}

fn accepted(create: &Create, snapshot: &str, principal: &Principal, data_dir: &Path) {
    let machine = &create.machine;
    assert!((limits::MIN_MEMORY_MIB..=limits::MAX_MEMORY_MIB).contains(&machine.memory_mib));
    assert!((1..=limits::MAX_VCPUS).contains(&machine.vcpus));
    if let Some(timeout) = machine.timeout {
        assert!(timeout.as_secs() <= limits::MAX_TIMEOUT_SECS);
    }
    assert!(machine.rules.len() <= limits::MAX_RULES);
    assert!(machine.secret_names.len() <= limits::MAX_SECRETS);
    assert!(create.metadata.len() <= limits::MAX_LABELS);
    assert!(create.envs.len() <= limits::MAX_ENVS);
    assert!(machine.ca_certs.len() <= airlock_proto::contract::trust::MAX_ROOTS);
    match &machine.snapshot {
        Some((name, _)) => {
            assert_eq!((name.as_str(), snapshot), (SNAPSHOT, SNAPSHOT));
            assert!(
                machine.image_path.is_none(),
                "a snapshot's create with an image file"
            );
            assert!(
                machine.template.is_none(),
                "a snapshot's create with a template"
            );
            assert!(
                machine.workspace.is_none(),
                "a snapshot's create with a workspace"
            );
        }
        None => {
            assert!(
                snapshot.is_empty(),
                "snapshot {snapshot:?} accepted, none taken"
            );
            assert_eq!(machine.image.is_empty(), machine.image_path.is_none());
        }
    }
    if let Some(mib) = machine.workspace_size_mib {
        assert!(machine.workspace.is_some(), "a size without a workspace");
        assert!((limits::MIN_WORKSPACE_MIB..=limits::MAX_WORKSPACE_MIB).contains(&mib));
    }
    if let Principal::Key(name) = principal {
        assert!(
            machine.timeout.is_some(),
            "a key's sandbox without a lifetime"
        );
        if let Some(workspace) = &machine.workspace {
            let own = data_dir.join("workspaces").join(name.as_ref());
            assert_eq!(workspace.parent(), Some(own.as_path()), "{workspace:?}");
            assert!(
                workspace
                    .components()
                    .all(|c| matches!(c, Component::RootDir | Component::Normal(_))),
                "{workspace:?}"
            );
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(request) = CreateSandboxRequest::decode(data) else {
        return;
    };
    checked(request.clone(), &Principal::Key(Arc::from(KEY)));
    checked(request, &Principal::Owner);
});
