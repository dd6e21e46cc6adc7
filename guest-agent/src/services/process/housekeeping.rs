//! A thread of the lowest priority for work that should not delay a
//! program's start or its exit report: making the next program's cgroup
//! ahead of time and removing finished programs' cgroups. Both are
//! system calls that take a millisecond or more on an emulated vCPU
//! (`mkdir` and `rmdir` in cgroupfs allocate and free the controllers'
//! state), and on one vCPU any thread that runs while a program's exec is
//! in flight makes that exec slower. At nice 19 the thread runs when the
//! guest would otherwise idle, for example while the host handles an exit
//! report.
//!
//! Jobs run in order. If the thread cannot be started, or has gone, a job
//! runs at once on the caller's thread instead, so none is ever lost.

use std::sync::mpsc::{channel, Sender};

/// One piece of work.
type Job = Box<dyn FnOnce() + Send>;

/// The lowest niceness Linux gives a thread.
const NICEST: i32 = 19;

/// A handle on the thread.
#[derive(Debug)]
pub struct Housekeeping {
    jobs: Option<Sender<Job>>,
}

impl Housekeeping {
    /// Starts the thread (on failure, logged, every job runs inline).
    pub fn start() -> Self {
        let (tx, rx) = channel::<Job>();
        let started = std::thread::Builder::new()
            .name("housekeeping".to_owned())
            .spawn(move || {
                let tid = rustix::thread::gettid();
                if let Err(e) = rustix::process::setpriority_process(Some(tid), NICEST) {
                    tracing::debug!(error = %e, "housekeeping keeps the default priority");
                }
                for job in rx {
                    job();
                }
            });
        match started {
            Ok(_) => Self { jobs: Some(tx) },
            Err(e) => {
                tracing::warn!(error = %e, "no housekeeping thread; its work runs inline");
                Self { jobs: None }
            }
        }
    }

    /// Runs `job` on the thread, or here if there is none.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        let job: Job = Box::new(job);
        let unsent = match &self.jobs {
            Some(jobs) => jobs.send(job).err().map(|unsent| unsent.0),
            None => Some(job),
        };
        if let Some(job) = unsent {
            job();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn jobs_run_in_order_off_the_callers_thread() {
        let housekeeping = Housekeeping::start();
        let (tx, rx) = channel();
        let caller = std::thread::current().id();
        for i in 0..5 {
            let tx = tx.clone();
            housekeeping.run(move || {
                let on = std::thread::current();
                tx.send((i, on.id() != caller, on.name().map(str::to_owned)))
                    .unwrap();
            });
        }
        let seen: Vec<_> = (0..5).map(|_| rx.recv().unwrap()).collect();
        for (i, (n, elsewhere, name)) in seen.into_iter().enumerate() {
            assert_eq!(n, i);
            assert!(elsewhere);
            assert_eq!(name.as_deref(), Some("housekeeping"));
        }
    }

    #[test]
    fn without_the_thread_a_job_runs_at_once() {
        let housekeeping = Housekeeping { jobs: None };
        let (tx, rx) = channel();
        housekeeping.run(move || tx.send(7).unwrap());
        assert_eq!(rx.try_recv().unwrap(), 7);
    }
}
