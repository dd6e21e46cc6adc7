//! What host and guest agree on besides the gRPC messages, in one place:
//! the kernel command line keys the host writes and the agent reads, the
//! guest paths the builder writes and the agent reads, the kernel modules
//! the guest needs, the vsock ports and the start-up announcement, and the
//! protocol's features with the revision that added each, and the limits
//! of running code ([`code`]), of change tracking ([`changes`]) and of the
//! roots a guest is given to trust ([`trust`]).
//!
//! Neither side spells any of these itself: the host bridge
//! (`airlock`), the agent (`airlock-agent`) and the builder
//! (`airlock-rootfs`) all name them from here.

use std::fmt;

/// The revision of `airlock.agent.v1` that this crate describes: the
/// revision of the newest [`Feature`].
pub const PROTOCOL_REVISION: u32 = 13;

/// The vsock port the agent listens on unless the kernel command line says
/// otherwise ([`cmdline::PORT`]).
pub const DEFAULT_AGENT_PORT: u32 = 1024;

/// The host vsock port on which the agent announces that it serves.
///
/// Once its gRPC listener is bound, the agent connects to the host (CID 2)
/// on this port, writes [`READY_ANNOUNCEMENT`] and closes. The host dials
/// the agent only after that: a host that knocks while the guest's vsock
/// driver is still setting up its queues can wedge a vhost-user vsock
/// device, and waiting for the guest's word also removes the host's
/// polling from every start. Hybrid-vsock devices (vhost-device-vsock,
/// Firecracker, Cloud Hypervisor) deliver it to the Unix socket
/// `<uds-path>_<port>`.
pub const READY_PORT: u32 = 1025;

/// What the agent writes on [`READY_PORT`]: one line, then end of stream.
pub const READY_ANNOUNCEMENT: &[u8] = b"airlock-agent ready\n";

/// The agent's virtio-serial channel (see [`crate::opening`] for how each
/// connection on it begins).
pub mod serial {
    use std::time::Duration;

    /// The name of the virtio-serial port the agent serves on: QEMU's
    /// `virtserialport,name=...`, which the guest lists in
    /// `/sys/class/virtio-ports/*/name`.
    pub const AGENT_PORT_NAME: &str = "airlock.agent.0";
    /// How often each side sends an HTTP/2 ping on an open connection.
    pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
    /// How long a ping may go unanswered before its side drops the
    /// connection (the host then opens a new one).
    pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
}

/// Which channel the agent serves on: the value of [`cmdline::CHANNEL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    /// The virtio-serial port [`serial::AGENT_PORT_NAME`]; snapshots keep it.
    Serial,
    /// AF_VSOCK on [`cmdline::PORT`], announced on [`READY_PORT`].
    Vsock,
}

impl Channel {
    /// The value on the kernel command line.
    pub const fn as_str(self) -> &'static str {
        match self {
            Channel::Serial => "serial",
            Channel::Vsock => "vsock",
        }
    }

    /// Parses a command line value.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "serial" => Some(Channel::Serial),
            "vsock" => Some(Channel::Vsock),
            _ => None,
        }
    }
}

/// Kernel command line keys (`key=value`), which the kernel leaves in
/// `/proc/cmdline` for the agent.
pub mod cmdline {
    /// The vsock port the agent serves on (default
    /// [`DEFAULT_AGENT_PORT`](super::DEFAULT_AGENT_PORT)).
    pub const PORT: &str = "airlock.port";
    /// The guest's hostname.
    pub const HOSTNAME: &str = "airlock.hostname";
    /// The channel the agent serves on: `serial` or `vsock` (the default,
    /// for hosts that do not say).
    pub const CHANNEL: &str = "airlock.channel";
    /// The agent's tracing env-filter.
    pub const LOG: &str = "airlock.log";
    /// The root image's disk (ext4), which the agent switches into.
    pub const ROOT: &str = "airlock.root";
    /// The workspace disk (ext4): the overlay's writable layer.
    pub const WORKSPACE: &str = "airlock.workspace";
}

/// Guest paths that the builder writes and the agent reads, and one the
/// agent writes for the guest's programs.
pub mod paths {
    /// The refusal log: one line per connection or DNS query the host
    /// refused, appended by the agent (`TIME WHERE OUTCOME: REASON`, e.g.
    /// `2026-12-02T10:00:00Z 192.0.2.7:22 connection reset: no rule allows
    /// 192.0.2.7:22`), readable by every program in the guest, so that a
    /// program whose connection was reset can learn why. On the guest's
    /// `/run` tmpfs; the host's docs and tests name it from here.
    pub const REFUSAL_LOG: &str = "/run/airlock/net.log";
    /// In the initramfs: the kernel modules to load, one absolute `.ko`
    /// path per line, dependencies first.
    pub const MODULES_ORDER: &str = "/etc/airlock/modules.order";
    /// In a root image: `KEY=VALUE` lines (a container image's `Env`) that
    /// every program started in it gets.
    pub const IMAGE_ENV: &str = "/etc/airlock/env";
}

/// The kernel modules the guest needs when the kernel has them as modules:
/// the virtio-mmio bus of `-M microvm`, its block and console devices,
/// virtio vsock, overlayfs, and for `Network`: a dummy link to route
/// through and nftables' NAT redirect. Their dependencies come along.
pub const GUEST_MODULES: [&str; 8] = [
    "virtio_mmio",
    "virtio_blk",
    "virtio_console",
    "vmw_vsock_virtio_transport",
    "overlay",
    "dummy",
    "nft_chain_nat",
    "nft_redir",
];

/// Running code in interpreter contexts (`airlock.agent.v1.Code`).
pub mod code {
    /// The language of Python contexts (and of a cell that names none).
    /// A language's name is also the id of its default context, which the
    /// agent makes for a cell that names no context, unless the host made
    /// it first (with the sandbox's environment).
    pub const PYTHON: &str = "python";
    /// The language of bash contexts.
    pub const BASH: &str = "bash";
    /// The most bytes of one representation of a rich output (a result's
    /// or a display's `MimeData`) that the agent passes on: text longer
    /// than this is cut (and says so), a larger image is replaced by a
    /// text note. Well under the 4 MiB message cap.
    pub const MAX_OUTPUT_BYTES: usize = 2 << 20;
    /// The most bytes of stdout or stderr in one event.
    pub const STREAM_CHUNK: usize = 64 * 1024;
    /// The MIME type of a matplotlib figure's chart data, beside its
    /// `image/png` in the same rich output: a JSON object in the vocabulary
    /// of E2B's charts (`type` line, scatter, bar, pie, box_and_whisker,
    /// superchart or unknown; `title`, axis labels, ticks and scales,
    /// `elements`). The agent passes it to its interpreter driver, which
    /// extracts the data; front ends read it under this name.
    pub const CHART_MIME_TYPE: &str = "application/vnd.airlock.chart+json";
}

/// Tracking what a run changed (`Files.SnapshotTree`, `Files.TreeChanges`,
/// `Files.DownloadPaths`).
pub mod changes {
    /// The most entries one snapshot records, and one `TreeChanges` scans.
    pub const MAX_ENTRIES: u64 = 100_000;
    /// The most changes one `TreeChanges` reports, and paths one
    /// `DownloadPaths` takes.
    pub const MAX_CHANGES: u64 = 100_000;
    /// The most entries the agent keeps in snapshots together; the oldest
    /// snapshot is forgotten first.
    pub const MAX_HELD_ENTRIES: u64 = 2 * MAX_ENTRIES;
}

/// The CA certificates a guest is given to trust (`System.TrustRoots`).
pub mod trust {
    /// The most certificates one `TrustRoots` call carries: a system store
    /// holds about 150, so this leaves room for a large corporate one
    /// while keeping the request far under the 4 MiB message cap.
    pub const MAX_ROOTS: usize = 1000;
    /// The most bytes of one certificate (DER).
    pub const MAX_ROOT_BYTES: usize = 16 * 1024;
    /// The most bytes of all the certificates of one call together (DER),
    /// under the 4 MiB message cap.
    pub const MAX_TOTAL_BYTES: usize = 3 << 20;
    /// The guest's bundle of trusted roots (PEM), where OpenSSL on
    /// Debian, Ubuntu and Alpine looks by default.
    pub const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
    /// The guest's directory of trusted roots, each linked by its subject
    /// hash (`<8 hex digits>.N`), as OpenSSL's `-CApath` reads it.
    pub const CERT_DIR: &str = "/etc/ssl/certs";
    /// Where update-ca-certificates takes local CA certificates from
    /// (`*.crt`), so that a guest that runs it keeps the roots it was given.
    pub const LOCAL_CERT_DIR: &str = "/usr/local/share/ca-certificates";
    /// The environment variables that name a CA bundle to the runtimes and
    /// tools that read their roots from somewhere else than the system
    /// store, or let a variable override it: OpenSSL, Python's requests,
    /// curl, pip, git and Node (which adds the file to its own roots).
    pub const BUNDLE_VARIABLES: [&str; 6] = [
        "SSL_CERT_FILE",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "PIP_CERT",
        "NODE_EXTRA_CA_CERTS",
        "GIT_SSL_CAINFO",
    ];
    /// The variable that names OpenSSL's certificate directory.
    pub const DIR_VARIABLE: &str = "SSL_CERT_DIR";
}

/// A feature of the protocol that a host may need from an agent, with the
/// revision of `airlock.agent.v1` that added it. A host checks a feature
/// against the agent's reported revision before a call an older agent
/// would silently misread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Feature {
    /// `Process.Start` with a user, stdin, a tag or a timeout.
    ExtendedStart,
    /// `Process.Connect`: re-attaching to a program's output.
    Attach,
    /// `Process.List`.
    List,
    /// The `Files` service.
    Files,
    /// Per-program limits, privileges and usage reports.
    Limits,
    /// Programs on a terminal (`StartRequest.pty`, `Process.Resize`).
    Pty,
    /// `System.SetClock`.
    SetClock,
    /// `System.Personalize` and `CheckResponse.sandbox_id`.
    Personalize,
    /// The `Code` service: interpreter contexts and cells.
    RunCode,
    /// `Files.SnapshotTree`, `TreeChanges` and `DownloadPaths`.
    TreeChanges,
    /// The agent's timestamps of a program (`Started.received_us`,
    /// `spawned_us`; `Exited.first_output_us`, `exited_us`).
    ExecStamps,
    /// The `Network` service: guest connections and DNS carried to the host.
    Network,
    /// `System.TrustRoots`: CA certificates the guest's programs trust.
    TrustRoots,
    /// `StartRequest.transient`: a program that leaves nothing in the
    /// agent (its tree killed at its exit, then forgotten).
    Transient,
    /// `Network.Dial`: connections from the host to a guest port (ingress).
    Dial,
    /// `CheckResponse.disk_total_bytes` and `disk_used_bytes`: the guest's
    /// writable root measured.
    DiskFigures,
}

impl Feature {
    /// Every feature, oldest first.
    pub const ALL: [Feature; 16] = [
        Feature::ExtendedStart,
        Feature::Attach,
        Feature::List,
        Feature::Files,
        Feature::Limits,
        Feature::Pty,
        Feature::SetClock,
        Feature::Personalize,
        Feature::RunCode,
        Feature::TreeChanges,
        Feature::ExecStamps,
        Feature::Network,
        Feature::TrustRoots,
        Feature::Transient,
        Feature::Dial,
        Feature::DiskFigures,
    ];

    /// The protocol revision that added this feature.
    pub const fn revision(self) -> u32 {
        match self {
            Feature::ExtendedStart | Feature::Attach | Feature::List => 2,
            Feature::Files => 3,
            Feature::Limits => 4,
            Feature::Pty | Feature::SetClock => 5,
            Feature::Personalize => 6,
            Feature::RunCode | Feature::TreeChanges => 7,
            Feature::ExecStamps => 8,
            Feature::Network => 9,
            Feature::TrustRoots => 10,
            Feature::Transient => 11,
            Feature::Dial => 12,
            Feature::DiskFigures => 13,
        }
    }

    /// Whether an agent reporting `revision` has this feature.
    pub const fn supported_by(self, revision: u32) -> bool {
        revision >= self.revision()
    }
}

impl fmt::Display for Feature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Feature::ExtendedStart => "a user, stdin, tag or timeout for a program",
            Feature::Attach => "attach",
            Feature::List => "listing programs",
            Feature::Files => "the Files service",
            Feature::Limits => "limits, privileges and usage",
            Feature::Pty => "terminals",
            Feature::SetClock => "setting the guest clock",
            Feature::Personalize => "personalizing a guest (entropy, hostname, id)",
            Feature::RunCode => "running code in contexts",
            Feature::TreeChanges => "tracking file changes",
            Feature::ExecStamps => "the agent's timestamps of a program",
            Feature::Network => "network for the guest's programs",
            Feature::TrustRoots => "CA certificates the guest trusts",
            Feature::Transient => "programs that leave nothing in the agent",
            Feature::Dial => "connections into the guest (ingress)",
            Feature::DiskFigures => "the guest's disk figures",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_feature_is_the_current_revision() {
        let newest = Feature::ALL.iter().map(|f| f.revision()).max();
        assert_eq!(newest, Some(PROTOCOL_REVISION));
        let mut sorted = Feature::ALL;
        sorted.sort_by_key(|f| f.revision());
        assert_eq!(sorted, Feature::ALL, "ALL is oldest first");
    }

    #[test]
    fn an_agent_has_the_features_up_to_its_revision() {
        assert!(Feature::Files.supported_by(3));
        assert!(Feature::Files.supported_by(5));
        assert!(!Feature::Files.supported_by(2));
        assert!(!Feature::Pty.supported_by(4));
        assert!(Feature::RunCode.supported_by(7));
        assert!(!Feature::TreeChanges.supported_by(6));
    }

    #[test]
    fn limits_fit_the_message_cap() {
        // Each event carries one representation or one chunk: both far
        // under tonic's 4 MiB cap.
        const { assert!(code::MAX_OUTPUT_BYTES < 3 << 20) };
        const { assert!(code::STREAM_CHUNK <= code::MAX_OUTPUT_BYTES) };
        const { assert!(changes::MAX_HELD_ENTRIES >= changes::MAX_ENTRIES) };
        const { assert!(trust::MAX_TOTAL_BYTES < 4 << 20) };
        const { assert!(trust::MAX_ROOT_BYTES <= trust::MAX_TOTAL_BYTES) };
    }

    #[test]
    fn ports_do_not_collide() {
        assert_ne!(DEFAULT_AGENT_PORT, READY_PORT);
        assert!(READY_ANNOUNCEMENT.ends_with(b"\n"));
    }

    #[test]
    fn channels_round_trip() {
        for channel in [Channel::Serial, Channel::Vsock] {
            assert_eq!(Channel::parse(channel.as_str()), Some(channel));
        }
        assert_eq!(Channel::parse("tcp"), None);
    }
}
