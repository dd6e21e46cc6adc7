//! A create request parsed into a typed value before anything runs (the
//! shape of Firecracker's `parsed_request`): [`check`] turns an
//! `api::CreateSandboxRequest` into a [`Create`], the library's
//! [`Machine`] (what decides whether the warm pool can serve it) and the
//! server's own parts (labels, environment, public ports), or refuses it
//! with the status of its first bad field (`INVALID_ARGUMENT` naming it,
//! `NOT_FOUND` for an unknown image or template, `OWNER_ONLY` for what only
//! the owner may ask).
//!
//! One section per file, each a small function from the request's fields
//! to a typed value, checked in this order:
//!
//! - `labels`: `metadata` and `envs`.
//! - `resources`: `memory_mib` and `vcpus`.
//! - `lifetime`: `timeout_secs` and `idle`.
//! - `image`: `image` and `no_image`, resolved in the server's image store.
//! - `template`: `template`, the caller's own named template, else the
//!   server's.
//! - `snapshot`: `snapshot`, one of the caller's snapshots (which brings
//!   its own image and size: the image and template sections then leave
//!   the image to it).
//! - `workspace`: `workspace` and `workspace_size_mib`.
//! - `network`: `allow_net` and `secrets` (and the host access of a
//!   principal, [`apply_host_access`]).
//! - `trust`: `ca_certs`.
//!
//! then `public_ports`. Names are resolved against the server's own
//! stores ([`Context`]), never a process-wide default.

mod image;
mod labels;
mod lifetime;
mod network;
mod resources;
mod snapshot;
mod template;
mod trust;
mod workspace;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use tonic::Status;

use airlock::images::ImageStore;
use airlock::NetworkOptions;
use airlock_api::v1 as api;

use crate::machine::Machine;
use crate::principal::Principal;
use crate::snapshots::SnapshotNames;
use crate::state::State;
use crate::templates::Templates;
use crate::validate;

pub use network::{apply_host_access, host_rules, network};
pub use resources::{resources, Resources};
#[cfg(feature = "fuzzing")]
pub use workspace::workspace_dir;

/// A checked create request.
#[derive(Debug)]
pub struct Create {
    pub machine: Machine,
    pub network: Option<NetworkOptions>,
    pub metadata: BTreeMap<String, String>,
    pub envs: BTreeMap<String, String>,
    pub template: String,
    /// Guest ports the ingress serves without the token.
    pub public_ports: Vec<u16>,
    /// The named workspace (kept by the server; `machine.workspace` is
    /// its file), if the request names one.
    pub named_workspace: Option<String>,
}

/// What of the server a create is checked against: its stores, where its
/// names are looked up, and its default lifetime.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Resolves image names.
    pub images: &'a ImageStore,
    /// Resolves template names (the caller's own, then the server's).
    pub templates: &'a Templates,
    /// Resolves snapshot names (the caller's).
    pub snapshots: &'a SnapshotNames,
    /// The server's data directory (named workspaces are under it).
    pub data_dir: &'a Path,
    /// The lifetime of a request that names none.
    pub default_timeout: Duration,
}

impl<'a> Context<'a> {
    /// The server's own stores and defaults.
    pub fn of(state: &'a State) -> Self {
        Context {
            images: &state.images,
            templates: &state.templates,
            snapshots: &state.snapshots,
            data_dir: &state.config.data_dir,
            default_timeout: state.config.default_timeout,
        }
    }
}

/// Checks `request`, section by section, and makes it a [`Create`].
pub fn check(
    request: api::CreateSandboxRequest,
    principal: &Principal,
    context: &Context<'_>,
) -> Result<Create, Status> {
    let labels = labels::labels(&request.metadata, &request.envs)?;
    let resources = resources::resources(request.memory_mib, request.vcpus)?;
    let lifetime = lifetime::lifetime(
        request.timeout_secs,
        request.idle.as_ref(),
        principal,
        context.default_timeout,
    )?;
    let snapshot = snapshot::snapshot(&request, principal, context.snapshots)?;
    let image = match &snapshot {
        // The snapshot's own root: its image's name, its pinned file.
        Some((named, _)) => image::Image {
            name: named.image.clone(),
            path: None,
        },
        None => image::image(&request.image, request.no_image, context.images)?,
    };
    let template = template::template(&request, principal, context.templates)?;
    let workspace = workspace::workspace(&request, principal, context.data_dir)?;
    let network = network::network(&request.allow_net, &request.secrets)?;
    let ca_certs = trust::ca_certs(&request.ca_certs)?;
    let public_ports = validate::ports("public_ports", &request.public_ports)?;
    let options = network.options();
    let machine = Machine {
        image: image.name,
        image_path: image.path,
        memory_mib: resources.memory_mib,
        vcpus: resources.vcpus,
        timeout: lifetime.timeout,
        idle: lifetime.idle,
        cold: request.cold,
        rules: network.rules,
        secret_names: network.secret_names,
        workspace: workspace.path,
        workspace_size_mib: workspace.size_mib,
        ca_certs,
        template,
        snapshot: snapshot.map(|(named, snapshot)| (named.name, snapshot)),
    };
    Ok(Create {
        machine,
        network: options,
        metadata: labels.metadata,
        envs: labels.envs,
        template: request.template,
        public_ports,
        named_workspace: workspace.named,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use airlock_api::reason::field_of;

    /// A context on empty stores in a temporary directory.
    struct Fixture {
        pub dir: tempfile::TempDir,
        pub images: ImageStore,
        pub templates: Templates,
        pub snapshots: SnapshotNames,
    }

    impl Fixture {
        pub fn new() -> Fixture {
            let dir = tempfile::tempdir().expect("a temporary directory");
            Fixture {
                images: ImageStore::at(dir.path().join("images")),
                templates: Templates::new(dir.path().join("templates"), dir.path(), 1),
                snapshots: SnapshotNames::new(dir.path()),
                dir,
            }
        }

        pub fn context(&self) -> Context<'_> {
            Context {
                images: &self.images,
                templates: &self.templates,
                snapshots: &self.snapshots,
                data_dir: self.dir.path(),
                default_timeout: Duration::from_secs(3600),
            }
        }
    }

    fn no_image() -> api::CreateSandboxRequest {
        api::CreateSandboxRequest {
            no_image: true,
            ..api::CreateSandboxRequest::default()
        }
    }

    #[test]
    fn a_plain_request_gets_the_defaults() {
        let fixture = Fixture::new();
        let create = check(no_image(), &Principal::Owner, &fixture.context()).unwrap();
        assert_eq!(
            create.machine.memory_mib,
            crate::machine::DEFAULT_MEMORY_MIB
        );
        assert_eq!(create.machine.vcpus, crate::machine::DEFAULT_VCPUS);
        assert_eq!(create.machine.timeout, Some(Duration::from_secs(3600)));
        assert!(create.machine.image.is_empty() && create.machine.image_path.is_none());
        assert!(create.network.is_none() && create.named_workspace.is_none());
    }

    #[test]
    fn the_first_bad_section_is_the_one_refused() {
        let fixture = Fixture::new();
        // Bad memory and bad rules: memory comes first.
        let request = api::CreateSandboxRequest {
            memory_mib: 1,
            allow_net: vec!["not a rule!".to_owned()],
            ..no_image()
        };
        let refused = check(request, &Principal::Owner, &fixture.context()).unwrap_err();
        assert_eq!(field_of(&refused), Some("memory_mib"), "{refused:?}");
        // Bad labels come before everything.
        let request = api::CreateSandboxRequest {
            memory_mib: 1,
            metadata: [("a b".to_owned(), String::new())].into(),
            ..no_image()
        };
        let refused = check(request, &Principal::Owner, &fixture.context()).unwrap_err();
        assert_eq!(field_of(&refused), Some("metadata"), "{refused:?}");
    }

    #[test]
    fn rules_and_secrets_make_a_network_and_ports_are_kept_once() {
        let fixture = Fixture::new();
        let request = api::CreateSandboxRequest {
            allow_net: vec!["example.com".to_owned()],
            public_ports: vec![8080, 8080, 80],
            ..no_image()
        };
        let create = check(request, &Principal::Owner, &fixture.context()).unwrap();
        assert!(create.network.is_some());
        assert_eq!(create.machine.rules.len(), 1);
        assert_eq!(create.public_ports, [8080, 80]);
        let bad = api::CreateSandboxRequest {
            public_ports: vec![0],
            ..no_image()
        };
        let refused = check(bad, &Principal::Owner, &fixture.context()).unwrap_err();
        assert_eq!(field_of(&refused), Some("public_ports"));
    }
}
