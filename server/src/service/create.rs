//! A create request, checked field by field, as the library's builder: the
//! [`Machine`] (what decides whether the warm pool can serve it) and the
//! server's own parts (labels, environment), which any sandbox can take.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use tonic::Status;

use airlock::network::secrets::Secrets;
use airlock::template::{NamedError, NamedStore, NamedTemplate};
use airlock::{
    CaCert, HostAccess, IdlePolicy, NetRule, NetworkOptions, NetworkPolicy, SandboxBuilder, Secret,
};
use airlock_api::limits;
use airlock_api::reason::{self, invalid};
use airlock_api::v1::{self as api, ErrorReason};

use crate::principal::Principal;
use crate::validate;

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
}

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
        builder
    }
}

/// Where a key's named workspaces live (as [`crate::workspaces`] keeps
/// them).
pub fn workspace_dir(data_dir: &std::path::Path, principal: &Principal) -> PathBuf {
    let owner = principal.key().unwrap_or(crate::keys::OWNER_NAME);
    data_dir.join("workspaces").join(owner)
}

/// Refuses a rule of `rules` whose whole range is the host's own
/// (loopback, link-local, an address of the host's interfaces) when
/// `access` is denied: INVALID_ARGUMENT naming `field[INDEX]` and why.
pub fn host_rules(field: &str, rules: &[NetRule], access: HostAccess) -> Result<(), Status> {
    airlock::network::host::check_rules(rules, access)
        .map_err(|(index, error)| invalid(&format!("{field}[{index}]"), error))
}

/// Gives `create`'s network the host access of its principal (`access`:
/// a key's is always denied), refusing its rules that reach only the host
/// when that is denied.
pub fn apply_host_access(create: &mut Create, access: HostAccess) -> Result<(), Status> {
    host_rules("allow_net", &create.machine.rules, access)?;
    create.network = create
        .network
        .take()
        .map(|network| network.host_access(access));
    Ok(())
}

/// Checks `request` and makes it a [`Create`]. `images` resolves image
/// names; `default_timeout` is the lifetime of a request that names none.
pub fn check(
    request: api::CreateSandboxRequest,
    principal: &Principal,
    images: &airlock::images::ImageStore,
    data_dir: &std::path::Path,
    default_timeout: Duration,
) -> Result<Create, Status> {
    validate::labels("metadata", &request.metadata)?;
    let envs = validate::envs("envs", &request.envs)?;
    let memory_mib = match request.memory_mib {
        0 => DEFAULT_MEMORY_MIB,
        mib => validate::within(
            "memory_mib",
            mib,
            limits::MIN_MEMORY_MIB,
            limits::MAX_MEMORY_MIB,
        )?,
    };
    let vcpus = match request.vcpus {
        0 => DEFAULT_VCPUS,
        n => validate::within("vcpus", n, 1, limits::MAX_VCPUS)?,
    };
    let timeout = match request.timeout_secs {
        None => Some(default_timeout),
        Some(0) => {
            principal.require_owner("a sandbox without a timeout (timeout_secs 0)")?;
            None
        }
        Some(secs) => Some(Duration::from_secs(validate::within(
            "timeout_secs",
            secs,
            1,
            limits::MAX_TIMEOUT_SECS,
        )?)),
    };
    let idle = match request.idle {
        None => None,
        Some(idle) => {
            let after = validate::within(
                "idle.timeout_secs",
                idle.timeout_secs,
                1,
                limits::MAX_IDLE_SECS,
            )?;
            let policy = match idle.policy() {
                api::IdlePolicy::Pause => IdlePolicy::Pause,
                api::IdlePolicy::Stop => IdlePolicy::Stop,
                api::IdlePolicy::PauseToDisk => IdlePolicy::PauseToDisk,
                api::IdlePolicy::Unspecified => {
                    return Err(invalid(
                        "idle.policy",
                        "an idle timeout needs a policy: pause, pause-to-disk or stop",
                    ))
                }
            };
            Some((Duration::from_secs(after), policy))
        }
    };
    let (image, image_path) = if request.no_image {
        if !request.image.is_empty() {
            return Err(invalid("image", "no_image and an image exclude each other"));
        }
        (String::new(), None)
    } else {
        let name = match request.image.as_str() {
            "" => airlock::images::DEFAULT_IMAGE,
            name => name,
        };
        validate::name("image", name)?;
        let found = images.resolve(name).map_err(|error| {
            reason::status(
                ErrorReason::NotFound,
                format!(
                    "image: {}; ListImages lists the images (the owner builds them with \
                     airlock-rootfs image build)",
                    airlock::error_chain(&error)
                ),
            )
        })?;
        (name.to_owned(), Some(found.path))
    };
    let template = match request.template.as_str() {
        "" => None,
        name => {
            validate::name("template", name)?;
            let template = NamedStore::open_default().get(name).map_err(|error| {
                let reason = match error {
                    NamedError::NotFound(_) => ErrorReason::NotFound,
                    _ => ErrorReason::Internal,
                };
                reason::status(
                    reason,
                    format!(
                        "template: {}; ListTemplates lists them",
                        airlock::error_chain(&error)
                    ),
                )
            })?;
            let meta = template.meta();
            if request.memory_mib != 0 && request.memory_mib != meta.memory_mib
                || request.vcpus != 0 && request.vcpus != meta.vcpus
            {
                return Err(invalid(
                    "template",
                    format!(
                        "template {} was built for {} MiB and {} vCPUs; leave memory_mib and \
                         vcpus unset or equal",
                        meta.name, meta.memory_mib, meta.vcpus
                    ),
                ));
            }
            if request.no_image || !request.image.is_empty() || !request.workspace.is_empty() {
                return Err(invalid(
                    "template",
                    "a template brings its own root image; leave image, no_image and workspace unset",
                ));
            }
            Some(template)
        }
    };
    let (workspace, named_workspace) = match request.workspace.as_str() {
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
    let workspace_size_mib = match request.workspace_size_mib {
        0 => None,
        _ if workspace.is_none() => {
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
    validate::count("allow_net", &request.allow_net, limits::MAX_RULES)?;
    let rules = request
        .allow_net
        .iter()
        .map(|text| {
            if text.len() > limits::MAX_RULE_BYTES {
                return Err(invalid(
                    "allow_net",
                    format!("a rule longer than {} bytes", limits::MAX_RULE_BYTES),
                ));
            }
            text.parse::<NetRule>()
                .map_err(|error| invalid("allow_net", error))
        })
        .collect::<Result<Vec<_>, _>>()?;
    validate::count("secrets", &request.secrets, limits::MAX_SECRETS)?;
    let mut secrets = Vec::with_capacity(request.secrets.len());
    for secret in &request.secrets {
        if secret.value.len() > limits::MAX_SECRET_VALUE_BYTES {
            return Err(invalid(
                "secrets",
                format!(
                    "{}: a value longer than {} bytes",
                    secret.name,
                    limits::MAX_SECRET_VALUE_BYTES
                ),
            ));
        }
        if secret.hosts.is_empty() || secret.hosts.len() > limits::MAX_SECRET_HOSTS {
            return Err(invalid(
                "secrets",
                format!("{}: 1 to {} hosts", secret.name, limits::MAX_SECRET_HOSTS),
            ));
        }
        // The library's words never contain the value.
        let made = Secret::new(secret.name.clone(), secret.value.clone())
            .map_err(|error| invalid("secrets", error))?
            .hosts(&secret.hosts);
        secrets.push(made);
    }
    Secrets::new(secrets.clone())
        .map_err(|error| invalid("secrets", airlock::error_chain(&error)))?;
    validate::count("ca_certs", &request.ca_certs, limits::MAX_CA_CERTS)?;
    let mut ca_certs = Vec::new();
    for (index, pem) in request.ca_certs.iter().enumerate() {
        if pem.len() > limits::MAX_CA_CERT_BYTES {
            return Err(invalid(
                "ca_certs",
                format!(
                    "entry {}: longer than {} bytes",
                    index + 1,
                    limits::MAX_CA_CERT_BYTES
                ),
            ));
        }
        // Checked as the CLI's --ca-cert is: PEM, X.509, valid now, a CA.
        let certs = CaCert::from_pem(pem)
            .map_err(|error| invalid("ca_certs", format!("entry {}: {error}", index + 1)))?;
        ca_certs.extend(certs);
    }
    let public_ports = validate::ports("public_ports", &request.public_ports)?;
    let network = (!rules.is_empty() || !secrets.is_empty()).then(|| {
        let policy = NetworkPolicy::from_rules(rules.iter().cloned());
        secrets
            .iter()
            .cloned()
            .fold(NetworkOptions::new().policy(policy), NetworkOptions::secret)
    });
    let machine = Machine {
        image,
        image_path,
        memory_mib,
        vcpus,
        timeout,
        idle,
        cold: request.cold,
        rules,
        secret_names: request
            .secrets
            .iter()
            .map(|s| (s.name.clone(), s.hosts.clone()))
            .collect(),
        workspace,
        workspace_size_mib,
        ca_certs,
        template,
    };
    Ok(Create {
        machine,
        network,
        metadata: request.metadata.into_iter().collect(),
        envs,
        template: request.template,
        public_ports,
        named_workspace,
    })
}
