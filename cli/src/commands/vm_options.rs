//! The VM options of the commands that create a sandbox, declared once.
//!
//! [`VmOptions`] (size, root image, workspace, network) is flattened into `run`,
//! `shell` and `sandbox create`. [`BootOptions`] adds what only a command
//! that boots the VM itself takes (`run`, `shell`: accelerator, kernel,
//! initramfs, size of a new workspace, and [`TrustOptions`]: the CA
//! certificates the guest trusts) and turns the lot into a
//! [`SandboxBuilder`]. `sandbox create` hands its [`VmOptions`] to the
//! daemon, which picks the rest itself.

use std::path::{Path, PathBuf};

use airlock::{CaCert, Sandbox, SandboxBuilder};

use super::net_options::NetOptions;

/// The options every command that creates a sandbox takes: its memory and
/// CPUs, its root image, a workspace disk, and its network.
#[derive(Debug, clap::Args)]
pub struct VmOptions {
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 512, value_name = "MIB")]
    pub memory: u32,

    /// Number of virtual CPUs.
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub vcpus: u32,

    /// Root filesystem image: a name or id from `airlock image ls`, or the
    /// path of an ext4 file (with a '/', e.g. ./rootfs.ext4).
    #[arg(long, value_name = "NAME|PATH", default_value = airlock::images::DEFAULT_IMAGE)]
    pub image: String,

    /// No root image: run in the initramfs's busybox environment.
    #[arg(long, conflicts_with_all = ["image", "workspace"])]
    pub no_image: bool,

    /// Keep what the command writes (outside /tmp) in this disk file for
    /// the next run; created on first use. One sandbox at a time.
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,

    /// Boot from the kernel instead of cloning this configuration's
    /// template (made by the first start, reused by every later one; see
    /// `airlock template ls`).
    #[arg(long)]
    pub cold: bool,

    /// Start from a template `airlock template build` made: its root image,
    /// size and snapshot, with its START program already running.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = ["image", "no_image", "workspace", "memory", "vcpus", "cold"]
    )]
    pub template: Option<String>,

    #[command(flatten)]
    pub net: NetOptions,
}

impl VmOptions {
    /// The root image file `--image` names, `None` with `--no-image`, or a
    /// message that says what to do instead.
    pub fn image_file(&self) -> Result<Option<PathBuf>, String> {
        match self.no_image {
            true => Ok(None),
            false => super::image::locate(&self.image).map(Some),
        }
    }
}

/// The CA certificates the guest trusts, for a private CA or a host behind
/// a TLS-inspecting proxy. Each file is read and checked as the command
/// line is parsed, so a bad one is a usage error naming it, before
/// anything boots. Without either flag, `AIRLOCK_CA_CERTS` decides (in the
/// library, at start).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TrustOptions {
    /// Make the guest trust the CA certificates in FILE (PEM, one or more)
    /// besides its own roots: OpenSSL's store, Python, pip and curl, and
    /// SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS and the like
    /// for runtimes with roots of their own. The host also trusts them for
    /// --secret hosts. Repeatable. Default: the files in AIRLOCK_CA_CERTS
    /// (separated by ':'; the entry `host` is --trust-host-roots).
    #[arg(long = "ca-cert", value_name = "FILE", value_parser = parse_ca_file)]
    pub ca_certs: Vec<CaFile>,

    /// Make the guest trust exactly the host's system trust store instead
    /// of its image's roots (plus any --ca-cert): what a host behind a
    /// TLS-inspecting proxy needs for the guest to reach what the host reaches.
    #[arg(long)]
    pub trust_host_roots: bool,
}

/// One `--ca-cert`: the file and its certificates, checked.
#[derive(Debug, Clone)]
pub struct CaFile {
    pub path: PathBuf,
    pub certs: Vec<CaCert>,
}

/// Reads and checks a `--ca-cert` file; the message names it.
pub(crate) fn parse_ca_file(path: &str) -> Result<CaFile, String> {
    let path = Path::new(path);
    let certs = CaCert::from_pem_file(path).map_err(|e| airlock::error_chain(&e))?;
    Ok(CaFile {
        path: path.to_owned(),
        certs,
    })
}

impl TrustOptions {
    /// Whether a flag was given (else the library's default decides).
    pub fn is_set(&self) -> bool {
        !self.ca_certs.is_empty() || self.trust_host_roots
    }

    /// `builder` told what the flags say; untouched without flags.
    pub fn apply(&self, builder: SandboxBuilder) -> SandboxBuilder {
        if !self.is_set() {
            return builder;
        }
        for file in &self.ca_certs {
            tracing::debug!(file = %file.path.display(), certs = file.certs.len(), "--ca-cert");
        }
        let certs = self
            .ca_certs
            .iter()
            .flat_map(|file| file.certs.iter().cloned());
        builder
            .ca_certs(certs)
            .trust_host_roots(self.trust_host_roots)
    }
}

/// [`VmOptions`] and what a command that boots the VM in this process
/// (`run`, `shell`) takes besides.
#[derive(Debug, clap::Args)]
pub struct BootOptions {
    #[command(flatten)]
    pub vm: VmOptions,

    /// CPU accelerator: auto, kvm or tcg (default: AIRLOCK_ACCEL or auto).
    #[arg(long, value_name = "ACCEL")]
    pub accel: Option<airlock::Accel>,

    /// Guest kernel (default: kernel/vmlinuz in the Airlock home).
    #[arg(long, value_name = "PATH")]
    pub kernel: Option<PathBuf>,

    /// Initramfs with the agent (default: initramfs.cpio in the Airlock home).
    #[arg(long, value_name = "PATH")]
    pub initramfs: Option<PathBuf>,

    /// Size limit of a new workspace, e.g. 512M, 4G (sparse: costs only
    /// what is written).
    #[arg(long, value_name = "SIZE", default_value = "4G", value_parser = super::parse_size)]
    pub workspace_size: u64,

    #[command(flatten)]
    pub trust: TrustOptions,
}

impl BootOptions {
    /// The sandbox as the options describe it, its image located; or a
    /// message that says what to do instead.
    pub fn builder(&self) -> Result<SandboxBuilder, String> {
        let vm = &self.vm;
        if let Some(name) = &vm.template {
            return self.template_builder(name);
        }
        let mut builder = Sandbox::builder()
            .memory_mib(vm.memory)
            .vcpus(vm.vcpus)
            .from_template(!vm.cold);
        if let Some(accel) = self.accel {
            builder = builder.accel(accel);
        }
        if let Some(kernel) = &self.kernel {
            builder = builder.kernel(kernel.clone());
        }
        if let Some(initramfs) = &self.initramfs {
            builder = builder.initramfs(initramfs.clone());
        }
        if let Some(image) = vm.image_file()? {
            builder = builder.image(image);
        }
        if let Some(workspace) = &vm.workspace {
            builder = builder
                .workspace(workspace.clone())
                .workspace_size(self.workspace_size);
        }
        if let Some(network) = vm.net.network()? {
            builder = builder.network(network);
        }
        Ok(self.trust.apply(builder))
    }
}

impl BootOptions {
    /// The sandbox of `--template NAME`: the template's own image, size
    /// and snapshot, with the network and trust options applied.
    fn template_builder(&self, name: &str) -> Result<SandboxBuilder, String> {
        let template = airlock::template::NamedStore::open_default()
            .get(name)
            .map_err(|e| airlock::error_chain(&e))?;
        let mut builder = Sandbox::builder().template(&template);
        if let Some(accel) = self.accel {
            builder = builder.accel(accel);
        }
        if let Some(kernel) = &self.kernel {
            builder = builder.kernel(kernel.clone());
        }
        if let Some(initramfs) = &self.initramfs {
            builder = builder.initramfs(initramfs.clone());
        }
        if let Some(network) = self.vm.net.network()? {
            builder = builder.network(network);
        }
        Ok(self.trust.apply(builder))
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory, Parser};

    use super::super::{Args, Commands};

    #[test]
    fn the_commands_are_well_formed() {
        // Also checks that the help overrides name real arguments.
        Args::command().debug_assert();
    }

    #[test]
    fn no_image_conflicts_with_image_and_workspace_in_every_command() {
        let commands: [(&[&str], &[&str]); 3] = [
            (&["run"], &["--", "true"]),
            (&["shell"], &[]),
            (&["sandbox", "create"], &[]),
        ];
        for (command, rest) in commands {
            for other in [["--image", "x"], ["--workspace", "w"]] {
                let argv = [&["airlock"], command, &other, rest].concat();
                assert!(Args::try_parse_from(&argv).is_ok(), "{argv:?} refused");
                let argv = [&["airlock"], command, &["--no-image"], &other, rest].concat();
                assert!(Args::try_parse_from(&argv).is_err(), "{argv:?} parsed");
            }
        }
    }

    #[test]
    fn ca_certs_are_read_as_the_command_line_is_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let good = dir.path().join("ca.pem");
        std::fs::write(&good, params.self_signed(&key).unwrap().pem()).unwrap();
        let key_file = dir.path().join("ca.key");
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        let commands: [(&[&str], &[&str]); 2] = [(&["run"], &["--", "true"]), (&["shell"], &[])];
        for (command, rest) in commands {
            let argv = [
                &["airlock"],
                command,
                &["--ca-cert", good.to_str().unwrap()],
                rest,
            ]
            .concat();
            let args = Args::try_parse_from(&argv).unwrap();
            let trust = match args.command {
                Commands::Run(run) => run.boot.trust,
                Commands::Shell(shell) => shell.boot.trust,
                _ => panic!("{argv:?}"),
            };
            assert_eq!(trust.ca_certs.len(), 1);
            assert_eq!(trust.ca_certs[0].certs.len(), 1);
            assert!(trust.is_set() && !trust.trust_host_roots);
            let bad = ["--ca-cert", key_file.to_str().unwrap()];
            let argv = [&["airlock"], command, &bad, rest].concat();
            let error = Args::try_parse_from(&argv).unwrap_err().to_string();
            assert!(error.contains(key_file.to_str().unwrap()), "{error}");
            assert!(error.contains("private key"), "{error}");
        }
        // Not `sandbox create`'s: the daemon does not take them.
        let argv = ["airlock", "sandbox", "create", "--trust-host-roots"];
        assert!(Args::try_parse_from(argv).is_err());
    }

    #[test]
    fn sandbox_create_takes_the_shared_options() {
        let args = Args::try_parse_from([
            "airlock",
            "sandbox",
            "create",
            "--memory",
            "256",
            "--vcpus",
            "2",
            "--no-image",
        ])
        .unwrap();
        let Commands::Sandbox(sandbox) = args.command else {
            panic!("not sandbox")
        };
        let super::super::sandbox::SandboxCommand::Create(create) = sandbox.command else {
            panic!("not create")
        };
        assert_eq!((create.vm.memory, create.vm.vcpus), (256, 2));
        assert_eq!(create.vm.image_file(), Ok(None));
    }
}
