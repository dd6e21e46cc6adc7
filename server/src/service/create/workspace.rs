//! The workspace section of a create: `workspace` (a name of the caller's
//! named workspaces, or the owner's host path) and `workspace_size_mib`
//! (the size of one the start makes).

use std::path::{Path, PathBuf};

use tonic::Status;

use airlock_api::limits;
use airlock_api::reason::invalid;
use airlock_api::v1 as api;

use crate::principal::Principal;
use crate::validate;

/// A create's workspace, checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Workspace {
    /// Its file, if the create has one.
    pub path: Option<PathBuf>,
    /// Its name, for a named workspace (kept by the server).
    pub named: Option<String>,
    /// The size of one the start makes, in MiB (none: the default).
    pub size_mib: Option<u64>,
}

/// Where a key's named workspaces live (as [`crate::workspaces`] keeps
/// them).
pub fn workspace_dir(data_dir: &Path, principal: &Principal) -> PathBuf {
    let owner = principal.key().unwrap_or(crate::keys::OWNER_NAME);
    data_dir.join("workspaces").join(owner)
}

/// The workspace `request` names: a name is the principal's own, in the
/// server's data directory `data_dir`; a host path is the owner's alone.
pub fn workspace(
    request: &api::CreateSandboxRequest,
    principal: &Principal,
    data_dir: &Path,
) -> Result<Workspace, Status> {
    let (path, named) = match request.workspace.as_str() {
        "" => (None, None),
        path if path.starts_with('/') => {
            principal.require_owner("a workspace given as a host path")?;
            if request.no_image {
                return Err(invalid("workspace", "a workspace needs a root image"));
            }
            (Some(PathBuf::from(path)), None)
        }
        name => {
            validate::name("workspace", name)?;
            if request.no_image {
                return Err(invalid("workspace", "a workspace needs a root image"));
            }
            (
                Some(workspace_dir(data_dir, principal).join(format!("{name}.ext4"))),
                Some(name.to_owned()),
            )
        }
    };
    let size_mib = match request.workspace_size_mib {
        0 => None,
        _ if path.is_none() => {
            return Err(invalid(
                "workspace_size_mib",
                "a workspace size needs a workspace",
            ))
        }
        mib => Some(validate::within(
            "workspace_size_mib",
            mib,
            limits::MIN_WORKSPACE_MIB,
            limits::MAX_WORKSPACE_MIB,
        )?),
    };
    Ok(Workspace {
        path,
        named,
        size_mib,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    fn asking(workspace: &str, size_mib: u64) -> api::CreateSandboxRequest {
        api::CreateSandboxRequest {
            workspace: workspace.to_owned(),
            workspace_size_mib: size_mib,
            ..api::CreateSandboxRequest::default()
        }
    }

    #[test]
    fn a_name_is_a_file_in_the_principals_own_directory() {
        let alice = Principal::Key("alice".into());
        let data = Path::new("/data");
        let checked = workspace(&asking("work", 32), &alice, data).unwrap();
        assert_eq!(
            checked.path.as_deref(),
            Some(Path::new("/data/workspaces/alice/work.ext4"))
        );
        assert_eq!(checked.named.as_deref(), Some("work"));
        assert_eq!(checked.size_mib, Some(32));
        let owners = workspace(&asking("work", 0), &Principal::Owner, data).unwrap();
        assert_eq!(
            owners.path.as_deref(),
            Some(Path::new("/data/workspaces/_owner/work.ext4"))
        );
        assert_eq!(
            workspace(&asking("", 0), &alice, data).unwrap(),
            Workspace::default()
        );
    }

    #[test]
    fn a_host_path_is_the_owners_and_a_size_needs_a_workspace() {
        let alice = Principal::Key("alice".into());
        let data = Path::new("/data");
        let refused = workspace(&asking("/etc/w.ext4", 0), &alice, data).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        let host = workspace(&asking("/srv/w.ext4", 0), &Principal::Owner, data).unwrap();
        assert_eq!(host.path.as_deref(), Some(Path::new("/srv/w.ext4")));
        assert_eq!(host.named, None);
        let refused = workspace(&asking("", 32), &alice, data).unwrap_err();
        assert_eq!(field_of(&refused), Some("workspace_size_mib"));
        let refused = workspace(&asking("w", 1), &alice, data).unwrap_err();
        assert_eq!(field_of(&refused), Some("workspace_size_mib"));
        let refused = workspace(&asking("../up", 0), &alice, data).unwrap_err();
        assert_eq!(field_of(&refused), Some("workspace"));
        let bare = api::CreateSandboxRequest {
            no_image: true,
            ..asking("w", 0)
        };
        let refused = workspace(&bare, &alice, data).unwrap_err();
        assert_eq!(field_of(&refused), Some("workspace"));
    }
}
