//! The gauges read at each scrape: the server's sandboxes by state, the
//! pool's depth, the guest memory and vCPUs committed against the host's,
//! the sandboxes past their end, and the network gateway's refusals (a
//! count the library keeps for the whole process).

use std::sync::Weak;
use std::time::SystemTime;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

use airlock::{NetProtocol, SandboxState};

use crate::machine::{DEFAULT_MEMORY_MIB, DEFAULT_VCPUS};
use crate::state::State;

/// The host's size, read once at start.
#[derive(Debug, Clone, Copy)]
pub struct Host {
    memory_bytes: u64,
    cpus: u64,
}

impl Host {
    /// `MemTotal` of `/proc/meminfo`, and the CPUs this process may use.
    pub fn read() -> Self {
        let memory_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|text| mem_total(&text))
            .unwrap_or(0);
        let cpus = std::thread::available_parallelism().map_or(0, |n| n.get() as u64);
        Host { memory_bytes, cpus }
    }
}

/// `MemTotal` in bytes, from `/proc/meminfo`'s text.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// What the gauges say at one moment.
#[derive(Debug, Default, Clone, PartialEq)]
struct Reading {
    /// Running, paused, on disk, ended.
    by_state: [i64; 4],
    pool_size: i64,
    pool_ready: i64,
    pool_filling: i64,
    memory_bytes: i64,
    vcpus: i64,
    overdue: i64,
    overdue_seconds: f64,
}

const STATES: [&str; 4] = ["running", "paused", "on_disk", "ended"];

/// One sandbox as the gauges see it.
struct Seen {
    state: SandboxState,
    memory_mib: u32,
    vcpus: u32,
    ends_at: Option<SystemTime>,
}

fn read(state: &State) -> Reading {
    let seen = state.registry.all().into_iter().map(|entry| Seen {
        state: entry.state(),
        memory_mib: entry.record.memory_mib,
        vcpus: entry.record.vcpus,
        ends_at: entry.handle.as_ref().and_then(|handle| handle.ends_at()),
    });
    let mut reading = tally(seen, SystemTime::now());
    let pool = state.sandboxes.pool_status();
    reading.pool_size = pool.size as i64;
    reading.pool_ready = pool.ready.len() as i64;
    reading.pool_filling = pool.filling as i64;
    if let Some(machine) = &state.pool {
        // Frozen members hold their memory; members starting will.
        let members = (pool.ready.len() + pool.filling) as i64;
        reading.memory_bytes += members * i64::from(machine.memory_mib) * (1 << 20);
        reading.vcpus += members * i64::from(machine.vcpus);
    }
    reading
}

/// The gauges of the sandboxes `seen` at `now`. A sandbox holds memory
/// while it runs or is paused in memory; one with no size recorded (left
/// by an older server) counts as the default.
fn tally(seen: impl Iterator<Item = Seen>, now: SystemTime) -> Reading {
    let mut reading = Reading::default();
    for sandbox in seen {
        let index = match sandbox.state {
            SandboxState::Running => 0,
            SandboxState::Paused => 1,
            SandboxState::OnDisk => 2,
            SandboxState::Ended(_) => 3,
        };
        reading.by_state[index] += 1;
        if index > 1 {
            continue;
        }
        let memory_mib = match sandbox.memory_mib {
            0 => DEFAULT_MEMORY_MIB,
            mib => mib,
        };
        let vcpus = match sandbox.vcpus {
            0 => DEFAULT_VCPUS,
            n => n,
        };
        reading.memory_bytes += i64::from(memory_mib) * (1 << 20);
        reading.vcpus += i64::from(vcpus);
        if let Some(past) = sandbox.ends_at.and_then(|end| now.duration_since(end).ok()) {
            reading.overdue += 1;
            reading.overdue_seconds = reading.overdue_seconds.max(past.as_secs_f64());
        }
    }
    reading
}

/// The gauges, registered once; each scrape reads the state anew.
#[derive(Debug)]
pub struct Live {
    state: Weak<State>,
    host: Host,
}

impl Live {
    /// The gauges of `state`, with the host's size read now.
    pub fn new(state: Weak<State>) -> Self {
        Live {
            state,
            host: Host::read(),
        }
    }
}

fn gauge<N: prometheus_client::encoding::EncodeGaugeValue + std::fmt::Debug>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    value: N,
) -> Result<(), std::fmt::Error> {
    let gauge = ConstGauge::new(value);
    let metric = encoder.encode_descriptor(name, help, None, gauge.metric_type())?;
    gauge.encode(metric)
}

impl Collector for Live {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        gauge(
            &mut encoder,
            "airlock_host_memory_bytes",
            "The host's memory (MemTotal)",
            self.host.memory_bytes as i64,
        )?;
        gauge(
            &mut encoder,
            "airlock_host_cpus",
            "The CPUs the server may use",
            self.host.cpus as i64,
        )?;
        let refusals = ConstCounter::new(0u64);
        let mut metric = encoder.encode_descriptor(
            "airlock_egress_refusals",
            "Connections and DNS queries of sandboxes the network gateway refused (its audit's refusals), by protocol",
            None,
            refusals.metric_type(),
        )?;
        for protocol in NetProtocol::ALL {
            if protocol == NetProtocol::Ingress {
                continue;
            }
            let name = protocol.to_string();
            let count = ConstCounter::new(airlock::network_refusals_in_process(protocol));
            count.encode(metric.encode_family(&[("protocol", name.as_str())])?)?;
        }
        let Some(state) = self.state.upgrade() else {
            return Ok(());
        };
        let reading = read(&state);
        let mut metric = encoder.encode_descriptor(
            "airlock_sandboxes",
            "The server's sandboxes, by state",
            None,
            ConstGauge::new(0i64).metric_type(),
        )?;
        for (state, count) in STATES.iter().zip(reading.by_state) {
            ConstGauge::new(count).encode(metric.encode_family(&[("state", *state)])?)?;
        }
        gauge(
            &mut encoder,
            "airlock_pool_size",
            "The members the warm pool keeps (0 without a pool)",
            reading.pool_size,
        )?;
        let mut metric = encoder.encode_descriptor(
            "airlock_pool_sandboxes",
            "The warm pool's members: ready (frozen, to hand out) and filling (starting)",
            None,
            ConstGauge::new(0i64).metric_type(),
        )?;
        ConstGauge::new(reading.pool_ready).encode(metric.encode_family(&[("state", "ready")])?)?;
        ConstGauge::new(reading.pool_filling)
            .encode(metric.encode_family(&[("state", "filling")])?)?;
        gauge(
            &mut encoder,
            "airlock_guest_memory_committed_bytes",
            "Guest memory of the sandboxes holding memory (running or paused in memory) and the pool's members",
            reading.memory_bytes,
        )?;
        gauge(
            &mut encoder,
            "airlock_guest_vcpus_committed",
            "vCPUs of the sandboxes holding memory and the pool's members",
            reading.vcpus,
        )?;
        gauge(
            &mut encoder,
            "airlock_sandboxes_overdue",
            "Sandboxes holding memory past their end time (their lifetime's ceiling), which should have been ended",
            reading.overdue,
        )?;
        gauge(
            &mut encoder,
            "airlock_sandbox_overdue_seconds",
            "The longest any sandbox holding memory has lived past its end time (0 when none has)",
            reading.overdue_seconds,
        )
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn mem_total_is_read_in_bytes() {
        let meminfo = "MemTotal:       24576000 kB\nMemFree:  100 kB\n";
        assert_eq!(mem_total(meminfo), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        let host = Host::read();
        assert!(host.memory_bytes > 0 && host.cpus > 0, "{host:?}");
    }

    #[test]
    fn only_sandboxes_holding_memory_commit_it_and_can_be_overdue() {
        let now = SystemTime::now();
        let sandbox = |state, memory_mib, ends_in: Option<i64>| Seen {
            state,
            memory_mib,
            vcpus: 2,
            ends_at: ends_in.map(|secs| match secs {
                s if s >= 0 => now + Duration::from_secs(s as u64),
                s => now - Duration::from_secs(s.unsigned_abs()),
            }),
        };
        let seen = vec![
            sandbox(SandboxState::Running, 1024, Some(60)),
            sandbox(SandboxState::Running, 0, Some(-90)),
            sandbox(SandboxState::Paused, 256, Some(-30)),
            sandbox(SandboxState::OnDisk, 4096, Some(-3000)),
            sandbox(
                SandboxState::Ended(airlock::EndReason::Stopped),
                4096,
                Some(-3000),
            ),
        ];
        let reading = tally(seen.into_iter(), now);
        assert_eq!(reading.by_state, [2, 1, 1, 1]);
        assert_eq!(
            reading.memory_bytes,
            i64::from(1024 + DEFAULT_MEMORY_MIB + 256) << 20
        );
        assert_eq!(reading.vcpus, 6);
        assert_eq!(reading.overdue, 2);
        assert_eq!(reading.overdue_seconds, 90.0);
    }
}
