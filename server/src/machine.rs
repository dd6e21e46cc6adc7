//! [`Machine`]: what a sandbox's guest machine is, as a checked create
//! request says (`service::create` makes it), and the library's builder
//! for it. Two requests with the same machine can be served by the same
//! pooled sandbox; the server keeps its pool's machine in its state.

use std::path::PathBuf;
use std::time::Duration;

use airlock::snapshot::Snapshot;
use airlock::template::NamedTemplate;
use airlock::{CaCert, IdlePolicy, NetRule, NetworkOptions, SandboxBuilder};
use airlock_api::limits;

/// The server's default guest memory and vCPUs, as the CLI's.
pub const DEFAULT_MEMORY_MIB: u32 = 512;
pub const DEFAULT_VCPUS: u32 = 1;

/// What the guest machine is: two requests with the same machine can be
/// served by the same pooled sandbox.
#[derive(Debug, Clone, PartialEq)]
pub struct Machine {
    /// The image's name ("" for none) and its file.
    pub image: String,
    pub image_path: Option<PathBuf>,
    pub memory_mib: u32,
    pub vcpus: u32,
    /// `None`: never killed for age.
    pub timeout: Option<Duration>,
    pub idle: Option<(Duration, IdlePolicy)>,
    pub cold: bool,
    pub rules: Vec<NetRule>,
    /// Name and hosts of each secret (the values stay out of comparisons
    /// and logs; they are in `network`).
    pub secret_names: Vec<(String, Vec<String>)>,
    pub workspace: Option<PathBuf>,
    /// The size of a workspace the start makes, in MiB (none: the
    /// default, [`limits::DEFAULT_WORKSPACE_MIB`]).
    pub workspace_size_mib: Option<u64>,
    /// Roots the guest trusts besides its image's (none: the server's
    /// default, `AIRLOCK_CA_CERTS` where it is set).
    pub ca_certs: Vec<CaCert>,
    /// The named template it starts from (its image, size and snapshot).
    pub template: Option<NamedTemplate>,
    /// The snapshot it starts from, with its name (its image, size,
    /// programs and files).
    pub snapshot: Option<(String, Snapshot)>,
}

impl Machine {
    /// Whether a sandbox with this machine can come from a pool of `pool`'s:
    /// the same image and size, and nothing that is fixed at boot and not
    /// in the pool's (a network, a workspace, other roots, an idle policy,
    /// a cold boot). The lifetime is set at handout.
    pub fn pooled_from(&self, pool: &Machine) -> bool {
        self.image == pool.image
            && self.memory_mib == pool.memory_mib
            && self.vcpus == pool.vcpus
            && self.timeout == pool.timeout
            && self.idle.is_none()
            && !self.cold
            && self.rules.is_empty()
            && self.secret_names.is_empty()
            && self.workspace.is_none()
            && self.ca_certs.is_empty()
            && self.template.is_none()
            && self.snapshot.is_none() == pool.snapshot.is_none()
            && self
                .snapshot
                .as_ref()
                .zip(pool.snapshot.as_ref())
                .is_none_or(|((_, a), (_, b))| a.id() == b.id())
    }

    /// The library's builder for this machine, from `base`.
    pub fn builder(&self, base: SandboxBuilder, network: Option<NetworkOptions>) -> SandboxBuilder {
        // A server's sandboxes outlive it: a restarted server adopts them.
        let mut builder = base
            .memory_mib(self.memory_mib)
            .vcpus(self.vcpus)
            .from_template(!self.cold)
            .max_lifetime(self.timeout)
            .adoptable(true);
        if let Some(path) = &self.image_path {
            builder = builder.image(path.clone());
        }
        if let Some(path) = &self.workspace {
            let mib = self
                .workspace_size_mib
                .unwrap_or(limits::DEFAULT_WORKSPACE_MIB);
            builder = builder.workspace(path.clone()).workspace_size(mib << 20);
        }
        if let Some((after, policy)) = self.idle {
            builder = builder.idle_timeout(after, policy);
        }
        if let Some(network) = network {
            builder = builder.network(network);
        }
        if !self.ca_certs.is_empty() {
            builder = builder.ca_certs(self.ca_certs.iter().cloned());
        }
        if let Some(template) = &self.template {
            builder = builder.template(template);
        }
        if let Some((_, snapshot)) = &self.snapshot {
            builder = builder.snapshot(snapshot);
        }
        builder
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain() -> Machine {
        Machine {
            image: "default".to_owned(),
            image_path: None,
            memory_mib: DEFAULT_MEMORY_MIB,
            vcpus: DEFAULT_VCPUS,
            timeout: Some(Duration::from_secs(60)),
            idle: None,
            cold: false,
            rules: Vec::new(),
            secret_names: Vec::new(),
            workspace: None,
            workspace_size_mib: None,
            ca_certs: Vec::new(),
            template: None,
            snapshot: None,
        }
    }

    #[test]
    fn only_a_machine_like_the_pools_comes_from_it() {
        let pool = plain();
        assert!(plain().pooled_from(&pool));
        let bigger = Machine {
            memory_mib: 1024,
            ..plain()
        };
        assert!(!bigger.pooled_from(&pool));
        let cold = Machine {
            cold: true,
            ..plain()
        };
        assert!(!cold.pooled_from(&pool));
        let with_workspace = Machine {
            workspace: Some(PathBuf::from("/w.ext4")),
            ..plain()
        };
        assert!(!with_workspace.pooled_from(&pool));
        let idle = Machine {
            idle: Some((Duration::from_secs(5), IdlePolicy::Pause)),
            ..plain()
        };
        assert!(!idle.pooled_from(&pool));
    }
}
