//! Choosing the CPU accelerator: KVM where it really works, TCG elsewhere.
//!
//! `/dev/kvm` existing is not enough: on a PVM host (`/sys/module/kvm_pvm`)
//! a normal guest kernel hangs under `accel=kvm`. Auto-detection therefore
//! asks for a hardware KVM module (`kvm_intel` or `kvm_amd`), no PVM, and a
//! `/dev/kvm` that opens read-write.

use std::fs::OpenOptions;
use std::path::Path;
use std::str::FromStr;

/// The environment variable that overrides [`Accel::Auto`].
pub const ACCEL_ENV: &str = "AIRLOCK_ACCEL";

/// How the guest's CPU runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Accel {
    /// KVM when the host really supports it, else TCG; `AIRLOCK_ACCEL` overrides.
    #[default]
    Auto,
    /// Hardware virtualisation through `/dev/kvm`.
    Kvm,
    /// QEMU's software emulation: slow, but works everywhere.
    Tcg,
}

/// An `AIRLOCK_ACCEL` or `--accel` value that is not `auto`, `kvm` or `tcg`.
#[derive(Debug, thiserror::Error)]
#[error("unknown accelerator {0:?}; use auto, kvm or tcg")]
pub struct ParseAccelError(String);

impl FromStr for Accel {
    type Err = ParseAccelError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(Accel::Auto),
            "kvm" => Ok(Accel::Kvm),
            "tcg" => Ok(Accel::Tcg),
            _ => Err(ParseAccelError(s.to_owned())),
        }
    }
}

impl Accel {
    /// Resolves `Auto` to a concrete accelerator: `AIRLOCK_ACCEL` first, then
    /// host detection.
    pub fn resolve(self) -> Result<Accel, ParseAccelError> {
        if self != Accel::Auto {
            return Ok(self);
        }
        match std::env::var(ACCEL_ENV) {
            Ok(value) => match value.parse()? {
                Accel::Auto => Ok(detect(Path::new("/"))),
                concrete => Ok(concrete),
            },
            Err(_) => Ok(detect(Path::new("/"))),
        }
    }

    /// The value of QEMU's `accel=` machine property.
    pub fn qemu_name(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg | Accel::Auto => "tcg",
        }
    }
}

/// Detects whether hardware KVM works on the host whose root is `root`
/// (a parameter so tests can use a fake tree).
pub fn detect(root: &Path) -> Accel {
    let module = |name: &str| root.join("sys/module").join(name).exists();
    if module("kvm_pvm") {
        tracing::debug!("PVM host: KVM cannot run a standard guest kernel, using TCG");
        return Accel::Tcg;
    }
    if !(module("kvm_intel") || module("kvm_amd")) {
        tracing::debug!("no kvm_intel/kvm_amd module, using TCG");
        return Accel::Tcg;
    }
    let dev = root.join("dev/kvm");
    match OpenOptions::new().read(true).write(true).open(&dev) {
        Ok(_) => Accel::Kvm,
        Err(error) => {
            tracing::debug!(%error, "cannot open {}, using TCG", dev.display());
            Accel::Tcg
        }
    }
}

/// Tells a TCG guest's kernel to trust its TSC as a clock.
///
/// Under TCG the guest's TSC is the host's, counted while the guest runs
/// (and carried in a snapshot), so it is steady. The guest's timer ticks
/// are not: on a busy host TCG delivers them late, so the kernel's
/// clocksource watchdog, which checks the TSC against the ticks, found a
/// skew a second after boot ("Marking TSC unstable due to clocksource
/// watchdog") and fell back to `refined-jiffies`. That clock moves in
/// 4 ms steps: no high-resolution timers, and a scheduler clock as coarse.
/// KVM guests use kvmclock instead.
pub(crate) const TCG_TSC_RELIABLE: &str = "tsc=reliable";

/// The host's TSC rate in kHz, as `/proc/cpuinfo` reports it.
///
/// Under TCG the guest's TSC runs at the host's rate, but the guest kernel
/// calibrates it against an emulated PIT; on a busy host that calibration
/// fails and boot stalls after "Marking TSC unstable". Passing the rate as
/// `tsc_early_khz=` skips the calibration. KVM guests use kvmclock instead.
pub(crate) fn host_tsc_khz() -> Option<u64> {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    parse_cpu_khz(&cpuinfo)
}

fn parse_cpu_khz(cpuinfo: &str) -> Option<u64> {
    let line = cpuinfo.lines().find(|line| line.starts_with("cpu MHz"))?;
    let mhz: f64 = line.split(':').nth(1)?.trim().parse().ok()?;
    let khz = (mhz * 1000.0).round();
    (1.0..1e9).contains(&khz).then_some(khz as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn fake_host(modules: &[&str], dev_kvm: bool) -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        for m in modules {
            fs::create_dir_all(root.path().join("sys/module").join(m)).unwrap();
        }
        fs::create_dir_all(root.path().join("dev")).unwrap();
        if dev_kvm {
            fs::write(root.path().join("dev/kvm"), b"").unwrap();
        }
        root
    }

    #[test]
    fn pvm_host_is_not_kvm_even_with_dev_kvm() {
        let host = fake_host(&["kvm", "kvm_pvm"], true);
        assert_eq!(detect(host.path()), Accel::Tcg);
    }

    #[test]
    fn hardware_module_and_device_mean_kvm() {
        assert_eq!(
            detect(fake_host(&["kvm", "kvm_intel"], true).path()),
            Accel::Kvm
        );
        assert_eq!(
            detect(fake_host(&["kvm", "kvm_amd"], true).path()),
            Accel::Kvm
        );
    }

    #[test]
    fn missing_device_or_module_means_tcg() {
        assert_eq!(detect(fake_host(&["kvm_intel"], false).path()), Accel::Tcg);
        assert_eq!(detect(fake_host(&["kvm"], true).path()), Accel::Tcg);
    }

    #[test]
    fn parses_names() {
        assert_eq!("KVM".parse::<Accel>().unwrap(), Accel::Kvm);
        assert_eq!("tcg".parse::<Accel>().unwrap(), Accel::Tcg);
        assert_eq!("auto".parse::<Accel>().unwrap(), Accel::Auto);
        assert!("hvf".parse::<Accel>().is_err());
    }

    #[test]
    fn tsc_rate_from_cpuinfo() {
        let cpuinfo =
            "processor\t: 0\nmodel name\t: Xeon\ncpu MHz\t\t: 2100.000\ncache size\t: 1 KB\n";
        assert_eq!(parse_cpu_khz(cpuinfo), Some(2_100_000));
        assert_eq!(parse_cpu_khz("cpu MHz\t: 2999.9996\n"), Some(3_000_000));
        assert_eq!(parse_cpu_khz("model name: x\n"), None);
        assert_eq!(parse_cpu_khz("cpu MHz\t: fast\n"), None);
    }
}
