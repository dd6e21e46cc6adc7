//! The QEMU `-M microvm` command line.
//!
//! Pure argument building, so it is unit-tested without starting anything.
//! The agent's channel is a virtio-serial port ([`AgentPort::Serial`]) or
//! the vhost-user vsock device ([`AgentPort::Vsock`]), whose backend process
//! maps the guest's memory: that needs a shared memfd. A template's memory
//! is a shared file, and a clone maps the same file privately (copy on
//! write) and waits for its state on `-incoming defer`
//! ([`GuestMemory`]). Disks are virtio-blk on virtio-mmio
//! (`virtio-blk-device`), one per [`Disk`], in order: the guest names them
//! `/dev/vda`, `/dev/vdb`, ... in the order they appear here.

use std::ffi::OsString;
use std::path::PathBuf;

use crate::Accel;

/// QEMU's `-sandbox` option: its seccomp filter with every optional
/// category denied. `-nodefaults` leaves out every default device, the
/// network card included, and no `-netdev`/`-nic` is ever added.
const SECCOMP_SANDBOX: &str =
    "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// Everything the QEMU command line depends on.
#[derive(Debug, Clone)]
pub(crate) struct QemuConfig {
    pub accel: Accel,
    /// The `-cpu` model: [`cpu_model`] for a new machine, the recorded
    /// one for a saved machine restored.
    pub cpu: String,
    pub memory_mib: u32,
    pub vcpus: u32,
    pub kernel: PathBuf,
    pub initramfs: PathBuf,
    pub kernel_cmdline: String,
    /// The agent's channel.
    pub agent_port: AgentPort,
    /// What backs the guest's memory.
    pub memory: GuestMemory,
    /// Start paused, waiting for a migration stream (`-incoming defer`).
    pub incoming: bool,
    pub console_log: PathBuf,
    pub qmp_socket: PathBuf,
    /// Block devices, in guest order.
    pub disks: Vec<Disk>,
    /// virtio-serial ports, each backed by a Unix socket QEMU listens on.
    pub serial_ports: Vec<SerialPort>,
}

/// The device the agent serves on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AgentPort {
    /// A virtio-serial port named
    /// [`AGENT_PORT_NAME`](airlock_proto::contract::serial::AGENT_PORT_NAME),
    /// with QEMU listening on this Unix socket for the host's side.
    Serial(PathBuf),
    /// vhost-user vsock, served by vhost-device-vsock on this socket.
    Vsock(PathBuf),
}

/// What backs the guest's RAM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum GuestMemory {
    /// Anonymous memory, private to QEMU.
    Private,
    /// A memfd that another process (a vhost-user backend) can map.
    SharedMemfd,
    /// A file: written through by a template (`shared`), mapped copy on
    /// write by a clone.
    File { path: PathBuf, shared: bool },
}

/// A named virtio-serial port: the guest sees `/dev/vportNpM` (and, with
/// udev, `/dev/virtio-ports/NAME`); the host connects to `socket`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerialPort {
    pub name: String,
    pub socket: PathBuf,
}

/// A raw disk image attached as a virtio-blk device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Disk {
    /// QEMU's id for the drive, also the device's serial (seen by the guest
    /// in `/sys/block/vdX/serial`).
    pub id: &'static str,
    pub path: PathBuf,
    /// Shared, read-only: any number of VMs may attach the same file.
    pub read_only: bool,
}

impl Disk {
    /// The drive id (and virtio serial) of the root image.
    pub const ROOT: &'static str = "root";
    /// The drive id (and virtio serial) of the workspace.
    pub const WORKSPACE: &'static str = "workspace";

    /// The `&'static` id of a disk a saved record names, if it is one of
    /// the known ones.
    pub fn known_id(name: &str) -> Option<&'static str> {
        [Self::ROOT, Self::WORKSPACE]
            .into_iter()
            .find(|known| *known == name)
    }
}

/// The guest's device for the `index`th disk (from 0): `/dev/vda`,
/// `/dev/vdb`, ... in the order of [`QemuConfig::disks`].
pub(crate) fn guest_disk_device(index: usize) -> Option<String> {
    let letter = u8::try_from(index).ok().and_then(|i| b'a'.checked_add(i))?;
    (letter <= b'z').then(|| format!("/dev/vd{}", letter as char))
}

/// The `-cpu` model for `accel`: the host's CPU under KVM; under TCG,
/// everything TCG emulates except two features that cost it time:
///
/// - ERMS ("enhanced `rep movsb`"). With it the guest kernel copies every
///   byte between user and kernel memory (pipes, the agent's port, files)
///   with `rep movsb`, and glibc uses it for large `memcpy`s. TCG runs a
///   `rep` string instruction one element per step, so a byte at a time is
///   the slowest copy there is. Without ERMS the kernel uses `rep movsq`
///   (eight bytes a step), and a 16 MiB pipe copy in the guest took 110 to
///   140 ms instead of 350 to 570.
/// - 5-level paging (LA57). TCG walks the guest's page tables in software
///   on every miss of its TLB, which it empties at each of the guest's
///   context switches (it has no PCID), so four levels are a fifth fewer
///   reads a walk. A guest of a few GiB has no use for the larger address
///   space.
///
/// Real CPUs do both fast, so KVM keeps the host's flags. A template is
/// only valid for the model it ran on, and the model is part of its key.
pub(crate) fn cpu_model(accel: Accel) -> &'static str {
    match accel {
        Accel::Kvm => "host",
        Accel::Tcg | Accel::Auto => "max,erms=off,la57=off",
    }
}

/// The most translated guest code TCG keeps, MiB (QEMU 7.2's own default
/// is 1 GiB). A cold boot fills about 52 MiB and programs run afterwards
/// keep adding to it, so an idle sandbox that had been busy held about
/// 400 MiB; at 64 MiB it holds about 265 and boots and runs as fast. Below
/// about 48 MiB TCG flushes its code during the boot itself and programs
/// start several times slower. KVM has no code buffer.
pub(crate) const TCG_CODE_BUFFER_MIB: u32 = 64;

/// The `-accel` option for `accel`.
pub(crate) fn accel_option(accel: Accel) -> String {
    match accel {
        Accel::Kvm => accel.qemu_name().to_owned(),
        Accel::Tcg | Accel::Auto => {
            format!("{},tb-size={TCG_CODE_BUFFER_MIB}", accel.qemu_name())
        }
    }
}

impl QemuConfig {
    /// The arguments after the program name.
    pub fn args(&self) -> Vec<OsString> {
        let mem = self.memory_mib;
        let cpu = self.cpu.as_str();
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |parts: &[&str]| args.extend(parts.iter().map(OsString::from));
        push(&[
            "-M",
            "microvm,memory-backend=mem",
            "-accel",
            &accel_option(self.accel),
        ]);
        push(&[
            "-cpu",
            cpu,
            "-smp",
            &self.vcpus.to_string(),
            "-m",
            &format!("{mem}M"),
        ]);
        let memory: OsString = match &self.memory {
            GuestMemory::Private => format!("memory-backend-ram,id=mem,size={mem}M").into(),
            GuestMemory::SharedMemfd => {
                format!("memory-backend-memfd,id=mem,size={mem}M,share=on").into()
            }
            GuestMemory::File { path, shared } => {
                let mut option = OsString::from(format!(
                    "memory-backend-file,id=mem,size={mem}M,share={},mem-path=",
                    if *shared { "on" } else { "off" }
                ));
                option.push(escape_commas(path));
                option
            }
        };
        args.push("-object".into());
        args.push(memory);
        let mut push = |parts: &[&str]| args.extend(parts.iter().map(OsString::from));
        // QEMU's seccomp filter: no obsolete system calls, no setuid and
        // friends, no fork/exec, no scheduler or resource changes.
        push(&["-sandbox", SECCOMP_SANDBOX]);
        push(&[
            "-nodefaults",
            "-no-user-config",
            "-no-reboot",
            "-display",
            "none",
        ]);
        // Named threads ("CPU 0/TCG", "CPU 0/KVM"): metering reads the
        // guest's CPU time from the vCPU threads.
        push(&["-name", "airlock,debug-threads=on"]);
        args.push("-kernel".into());
        args.push(self.kernel.clone().into());
        args.push("-initrd".into());
        args.push(self.initramfs.clone().into());
        args.push("-append".into());
        args.push(self.kernel_cmdline.clone().into());
        if let AgentPort::Vsock(socket) = &self.agent_port {
            args.push("-chardev".into());
            args.push(path_option("socket,id=vsock0,path=", socket));
            args.push("-device".into());
            args.push("vhost-user-vsock-device,chardev=vsock0".into());
        }
        for disk in &self.disks {
            // Commas in a -drive value are escaped by doubling them.
            let file = disk.path.as_os_str().to_string_lossy().replace(',', ",,");
            let mode = if disk.read_only {
                "readonly=on"
            } else {
                "discard=unmap"
            };
            args.push("-drive".into());
            args.push(format!("file={file},format=raw,if=none,{mode},id={}", disk.id).into());
            args.push("-device".into());
            args.push(format!("virtio-blk-device,drive={0},serial={0}", disk.id).into());
        }
        let agent_serial = match &self.agent_port {
            AgentPort::Serial(socket) => Some(SerialPort {
                name: airlock_proto::contract::serial::AGENT_PORT_NAME.to_owned(),
                socket: socket.clone(),
            }),
            AgentPort::Vsock(_) => None,
        };
        let ports: Vec<&SerialPort> = agent_serial.iter().chain(&self.serial_ports).collect();
        if !ports.is_empty() {
            push_args(&mut args, &["-device", "virtio-serial-device,id=vserial0"]);
        }
        for (index, port) in ports.into_iter().enumerate() {
            args.push("-chardev".into());
            let mut chardev = OsString::from(format!("socket,id=vport{index},path="));
            chardev.push(escape_commas(&port.socket));
            chardev.push(",server=on,wait=off");
            args.push(chardev);
            args.push("-device".into());
            let name = port.name.replace(',', ",,");
            args.push(
                format!("virtserialport,bus=vserial0.0,chardev=vport{index},name={name}").into(),
            );
        }
        args.push("-serial".into());
        args.push(path_option("file:", &self.console_log));
        args.push("-qmp".into());
        let mut qmp = path_option("unix:", &self.qmp_socket);
        qmp.push(",server=on,wait=off");
        args.push(qmp);
        if self.incoming {
            push_args(&mut args, &["-incoming", "defer"]);
        }
        args
    }
}

/// A path inside a QEMU option value, where a comma is written twice.
fn escape_commas(path: &std::path::Path) -> OsString {
    path.as_os_str().to_string_lossy().replace(',', ",,").into()
}

fn push_args(args: &mut Vec<OsString>, parts: &[&str]) {
    args.extend(parts.iter().map(OsString::from));
}

fn path_option(prefix: &str, path: &std::path::Path) -> OsString {
    let mut option = OsString::from(prefix);
    option.push(path.as_os_str());
    option
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn disks_are_named_vda_vdb_in_order() {
        assert_eq!(guest_disk_device(0).as_deref(), Some("/dev/vda"));
        assert_eq!(guest_disk_device(1).as_deref(), Some("/dev/vdb"));
        assert_eq!(guest_disk_device(25).as_deref(), Some("/dev/vdz"));
        assert_eq!(guest_disk_device(26), None);
    }

    #[test]
    fn a_recorded_disk_name_is_a_known_id_or_none() {
        assert_eq!(Disk::known_id("root"), Some(Disk::ROOT));
        assert_eq!(Disk::known_id("workspace"), Some(Disk::WORKSPACE));
        assert_eq!(Disk::known_id("other"), None);
    }

    fn config(accel: Accel) -> QemuConfig {
        QemuConfig {
            accel,
            cpu: cpu_model(accel).to_owned(),
            memory_mib: 512,
            vcpus: 2,
            kernel: "/k/vmlinuz".into(),
            initramfs: "/k/initramfs.cpio".into(),
            kernel_cmdline: "console=ttyS0 airlock.port=1024".into(),
            agent_port: AgentPort::Vsock("/s/vhost-user.sock".into()),
            memory: GuestMemory::SharedMemfd,
            incoming: false,
            console_log: "/s/console.log".into(),
            qmp_socket: "/s/qmp.sock".into(),
            disks: Vec::new(),
            serial_ports: Vec::new(),
        }
    }

    fn joined(config: &QemuConfig) -> String {
        config
            .args()
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn tcg_command_line_has_shared_memory_and_vhost_user_vsock() {
        let line = joined(&config(Accel::Tcg));
        assert!(
            line.contains("-M microvm,memory-backend=mem -accel tcg,tb-size=64"),
            "{line}"
        );
        assert!(
            line.contains("memory-backend-memfd,id=mem,size=512M,share=on"),
            "{line}"
        );
        assert!(
            line.contains("-chardev socket,id=vsock0,path=/s/vhost-user.sock"),
            "{line}"
        );
        assert!(
            line.contains("-device vhost-user-vsock-device,chardev=vsock0"),
            "{line}"
        );
        assert!(
            line.contains("-append console=ttyS0 airlock.port=1024"),
            "{line}"
        );
        assert!(line.contains("-smp 2"), "{line}");
        assert!(line.contains("-cpu max,erms=off,la57=off "), "{line}");
        assert!(line.contains("-name airlock,debug-threads=on"), "{line}");
        assert!(!line.contains("-incoming"), "{line}");
        assert!(!line.contains("virtio-serial"), "{line}");
    }

    #[test]
    fn the_serial_agent_port_comes_first_and_needs_no_vsock_device() {
        let mut config = config(Accel::Tcg);
        config.agent_port = AgentPort::Serial("/s/agent.sock".into());
        config.memory = GuestMemory::Private;
        config.serial_ports = vec![SerialPort {
            name: "mine".into(),
            socket: "/s/mine.sock".into(),
        }];
        let line = joined(&config);
        assert!(!line.contains("vhost-user"), "{line}");
        assert!(
            line.contains("memory-backend-ram,id=mem,size=512M"),
            "{line}"
        );
        assert!(
            line.contains("-chardev socket,id=vport0,path=/s/agent.sock,server=on,wait=off"),
            "{line}"
        );
        assert!(
            line.contains("chardev=vport0,name=airlock.agent.0"),
            "{line}"
        );
        assert!(line.contains("chardev=vport1,name=mine"), "{line}");
    }

    #[test]
    fn templates_share_a_file_and_clones_map_it_privately_and_wait_for_state() {
        let mut config = config(Accel::Tcg);
        config.memory = GuestMemory::File {
            path: "/t/a,b/memory".into(),
            shared: true,
        };
        let line = joined(&config);
        assert!(
            line.contains("memory-backend-file,id=mem,size=512M,share=on,mem-path=/t/a,,b/memory"),
            "{line}"
        );
        config.memory = GuestMemory::File {
            path: "/t/memory".into(),
            shared: false,
        };
        config.incoming = true;
        let line = joined(&config);
        assert!(line.contains("share=off,mem-path=/t/memory"), "{line}");
        assert!(line.ends_with("-incoming defer"), "{line}");
    }

    #[test]
    fn disks_are_virtio_mmio_block_devices_in_order() {
        let mut config = config(Accel::Tcg);
        assert!(!joined(&config).contains("-drive"));
        config.disks = vec![
            Disk {
                id: "root",
                path: "/img/a,b.ext4".into(),
                read_only: true,
            },
            Disk {
                id: "ws",
                path: "/w/ws.img".into(),
                read_only: false,
            },
        ];
        let line = joined(&config);
        let root = line
            .find("-drive file=/img/a,,b.ext4,format=raw,if=none,readonly=on,id=root")
            .expect(&line);
        let ws = line
            .find("-drive file=/w/ws.img,format=raw,if=none,discard=unmap,id=ws")
            .expect(&line);
        assert!(root < ws, "{line}");
        assert!(
            line.contains("-device virtio-blk-device,drive=root,serial=root"),
            "{line}"
        );
        assert!(
            line.contains("-device virtio-blk-device,drive=ws,serial=ws"),
            "{line}"
        );
    }

    #[test]
    fn serial_ports_share_one_virtio_serial_device() {
        let mut config = config(Accel::Tcg);
        assert!(!joined(&config).contains("virtio-serial"));
        config.serial_ports = vec![
            SerialPort {
                name: "org.qemu.guest_agent.0".into(),
                socket: "/s/qga.sock".into(),
            },
            SerialPort {
                name: "b".into(),
                socket: "/s/b.sock".into(),
            },
        ];
        let line = joined(&config);
        assert_eq!(line.matches("virtio-serial-device").count(), 1, "{line}");
        assert!(
            line.contains("-chardev socket,id=vport0,path=/s/qga.sock,server=on,wait=off"),
            "{line}"
        );
        assert!(
            line.contains(
                "-device virtserialport,bus=vserial0.0,chardev=vport0,name=org.qemu.guest_agent.0"
            ),
            "{line}"
        );
        assert!(line.contains("chardev=vport1,name=b"), "{line}");
    }

    #[test]
    fn seccomp_sandbox_on_and_no_network_device() {
        let mut config = config(Accel::Tcg);
        config.disks = vec![Disk {
            id: "root",
            path: "/img/root.ext4".into(),
            read_only: true,
        }];
        config.serial_ports = vec![SerialPort {
            name: "p".into(),
            socket: "/s/p.sock".into(),
        }];
        let args = config.args();
        let sandbox = args
            .iter()
            .position(|arg| arg == "-sandbox")
            .expect("-sandbox present");
        assert_eq!(
            args[sandbox + 1],
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
        );
        assert!(args.iter().any(|arg| arg == "-nodefaults"));
        for network in ["-netdev", "-nic", "-net"] {
            assert!(!args.iter().any(|arg| arg == network), "{network}");
        }
        let line = joined(&config);
        assert!(!line.contains("virtio-net"), "{line}");
    }

    #[test]
    fn kvm_uses_host_cpu_and_no_code_buffer() {
        let line = joined(&config(Accel::Kvm));
        assert!(line.contains("-accel kvm "), "{line}");
        assert!(!line.contains("tb-size"), "{line}");
        assert!(line.contains("-cpu host"), "{line}");
    }
}
