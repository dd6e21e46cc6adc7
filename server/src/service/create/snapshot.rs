//! The snapshot section of a create: `snapshot`, a snapshot of the
//! caller's by name (`Sandboxes.Snapshot` takes them). A snapshot brings
//! its own root image, size, programs and files: a create naming one
//! leaves the image, the template and the workspace unset, and its memory
//! and vCPUs unset or equal.

use tonic::Status;

use airlock::snapshot::Snapshot;
use airlock_api::reason::invalid;
use airlock_api::v1 as api;

use crate::principal::Principal;
use crate::snapshots::{Named, SnapshotNames};
use crate::validate;

/// The snapshot `request` starts from, if it names one, as `snapshots`
/// holds it for `principal`; `NOT_FOUND` for a name the caller lacks.
pub fn snapshot(
    request: &api::CreateSandboxRequest,
    principal: &Principal,
    snapshots: &SnapshotNames,
) -> Result<Option<(Named, Snapshot)>, Status> {
    let name = match request.snapshot.as_str() {
        "" => return Ok(None),
        name => name,
    };
    validate::name("snapshot", name)?;
    if request.no_image
        || !request.image.is_empty()
        || !request.template.is_empty()
        || !request.workspace.is_empty()
    {
        return Err(invalid(
            "snapshot",
            "a snapshot brings its own root image, programs and files; leave image, no_image, \
             template and workspace unset",
        ));
    }
    let (named, snapshot) = snapshots.get(principal, name)?;
    if request.memory_mib != 0 && request.memory_mib != named.memory_mib
        || request.vcpus != 0 && request.vcpus != named.vcpus
    {
        return Err(invalid(
            "snapshot",
            format!(
                "snapshot {name} was taken of a sandbox of {} MiB and {} vCPUs; leave memory_mib \
                 and vcpus unset or equal",
                named.memory_mib, named.vcpus
            ),
        ));
    }
    Ok(Some((named, snapshot)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::{field_of, reason_of};
    use airlock_api::v1::ErrorReason;

    fn named(name: &str) -> api::CreateSandboxRequest {
        api::CreateSandboxRequest {
            snapshot: name.to_owned(),
            ..api::CreateSandboxRequest::default()
        }
    }

    #[test]
    fn a_snapshot_is_the_callers_and_excludes_an_image() {
        let dir = tempfile::tempdir().unwrap();
        let snapshots = SnapshotNames::new(dir.path());
        assert!(snapshot(&named(""), &Principal::Owner, &snapshots)
            .unwrap()
            .is_none());
        let missing = snapshot(&named("web"), &Principal::Owner, &snapshots).unwrap_err();
        assert_eq!(reason_of(&missing), Some(ErrorReason::NotFound));
        assert!(
            missing.message().contains("no snapshot named web"),
            "{missing:?}"
        );
        let with_image = api::CreateSandboxRequest {
            image: "default".to_owned(),
            ..named("web")
        };
        let refused = snapshot(&with_image, &Principal::Owner, &snapshots).unwrap_err();
        assert_eq!(field_of(&refused), Some("snapshot"));
        let refused = snapshot(&named("../x"), &Principal::Owner, &snapshots).unwrap_err();
        assert_eq!(field_of(&refused), Some("snapshot"));
    }
}
