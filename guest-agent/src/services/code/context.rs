//! One context: an interpreter (a [`Driver`]) that runs cells one at a time
//! and keeps its state between them.
//!
//! The driver lives in a slot behind an async mutex: a cell holds it while
//! it runs, so cells queue in arrival order, and restart and delete take it
//! to replace or drop the driver. What other calls need while a cell runs
//! (the process tree to interrupt or kill, the figures `ContextInfo` shows)
//! sits in `Control` behind a plain mutex, never held across an await.
//!
//! A driver that died (killed after a deadline, `os._exit` in a cell, bash's
//! `exit`, the OOM killer) is dropped at the end of its cell; the next cell
//! starts a fresh one and says so (`context_restarted`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use airlock_proto::v1::{code_event, CellDone, CellStatus, CodeEvent, ContextInfo};
use tokio::sync::Mutex as AsyncMutex;

use super::cell::{self, Events};
use super::driver::{Driver, Launch};
use super::CodeError;
use crate::reaper::Reaper;
use crate::services::process::cgroup::Cgroups;
use crate::services::process::signal::Tree;

/// What starting an interpreter needs besides its [`Launch`].
#[derive(Debug, Clone)]
pub struct Spawner {
    /// Spawns and reaps.
    pub reaper: Reaper,
    /// A cgroup per interpreter, where the agent has cgroups.
    pub cgroups: Option<Arc<Cgroups>>,
}

impl Spawner {
    async fn start(&self, launch: &Launch) -> Result<Driver, CodeError> {
        Driver::start(launch, &self.reaper, self.cgroups.as_ref()).await
    }
}

/// What calls read or act on while a cell runs.
#[derive(Debug, Default)]
struct Control {
    tree: Option<Arc<Tree>>,
    pid: u32,
    language_version: String,
    execution_count: u32,
    busy: bool,
    deleted: bool,
}

/// One context.
#[derive(Debug)]
pub struct Context {
    id: String,
    launch: Launch,
    spawner: Spawner,
    slot: AsyncMutex<Option<Driver>>,
    control: Mutex<Control>,
    /// Set by `interrupt` while a cell runs; cleared when one starts.
    interrupted: AtomicBool,
}

impl Context {
    /// Starts a context's interpreter and returns the context.
    pub async fn start(
        id: String,
        launch: Launch,
        spawner: Spawner,
    ) -> Result<Arc<Context>, CodeError> {
        let driver = spawner.start(&launch).await?;
        let context = Arc::new(Context {
            id,
            launch,
            spawner,
            slot: AsyncMutex::new(None),
            control: Mutex::default(),
            interrupted: AtomicBool::new(false),
        });
        context.install(&mut *context.slot.lock().await, driver);
        Ok(context)
    }

    fn control(&self) -> MutexGuard<'_, Control> {
        self.control.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Puts a fresh driver in the slot.
    fn install(&self, slot: &mut Option<Driver>, driver: Driver) {
        let mut control = self.control();
        control.tree = Some(driver.tree());
        control.pid = driver.pid();
        control.language_version = driver.language_version().to_owned();
        control.execution_count = 0;
        *slot = Some(driver);
    }

    /// Empties the slot (the driver is killed as it drops).
    fn uninstall(&self, slot: &mut Option<Driver>) {
        let mut control = self.control();
        control.tree = None;
        control.pid = 0;
        *slot = None;
    }

    /// The context's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its language.
    pub fn language(&self) -> &'static str {
        self.launch.language
    }

    /// What `ContextInfo` says about it.
    pub fn info(&self) -> ContextInfo {
        let control = self.control();
        ContextInfo {
            id: self.id.clone(),
            language: self.launch.language.to_owned(),
            language_version: control.language_version.clone(),
            pid: control.pid,
            busy: control.busy,
            execution_count: control.execution_count,
        }
    }

    /// Runs a cell, sending its events and, last, `done` to `events`.
    pub async fn run(self: Arc<Self>, code: String, timeout: Option<Duration>, events: Events) {
        let mut slot = self.slot.lock().await;
        let started = Instant::now();
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        if self.control().deleted {
            let gone =
                cell::agent_error("ContextDeleted", format!("context {} was deleted", self.id));
            finish(
                &events,
                vec![gone],
                done(CellStatus::Error, 0, false, false, started),
            )
            .await;
            return;
        }
        // A driver that died since the last cell is replaced (one lost
        // during a cell was reported then, and its slot emptied).
        let mut restarted = false;
        if slot.as_ref().is_none_or(Driver::has_exited) {
            restarted = slot.is_some();
            self.uninstall(&mut slot);
            match self.spawner.start(&self.launch).await {
                Ok(driver) => self.install(&mut slot, driver),
                Err(e) => {
                    tracing::warn!(id = self.id, error = %airlock_report::chain(&e), "cannot start the interpreter");
                    let failed = cell::start_failed(&e);
                    finish(
                        &events,
                        vec![failed],
                        done(CellStatus::Error, 0, false, restarted, started),
                    )
                    .await;
                    return;
                }
            }
        }
        let Some(driver) = slot.as_mut() else {
            return;
        };
        self.interrupted.store(false, Ordering::SeqCst);
        self.control().busy = true;
        let ended = cell::run(driver, code, deadline, &self.interrupted, &events).await;
        {
            let mut control = self.control();
            control.busy = false;
            control.execution_count = ended.execution_count.max(control.execution_count);
        }
        if ended.lost {
            tracing::info!(id = self.id, "interpreter lost during a cell");
            self.uninstall(&mut slot);
        }
        drop(slot);
        let done = done(
            ended.status,
            ended.execution_count,
            ended.timed_out,
            ended.lost || ended.restarted || restarted,
            started,
        );
        finish(&events, Vec::new(), done).await;
    }

    /// Interrupts the running cell, if any.
    pub fn interrupt(&self) -> ContextInfo {
        let tree = {
            let control = self.control();
            control.busy.then(|| control.tree.clone()).flatten()
        };
        if let Some(tree) = tree {
            tracing::info!(id = self.id, "interrupting");
            self.interrupted.store(true, Ordering::SeqCst);
            Driver::interrupt(&tree);
        }
        self.info()
    }

    /// Replaces the interpreter with a fresh one; a running cell ends with
    /// an error.
    pub async fn restart(&self) -> Result<ContextInfo, CodeError> {
        self.kill_running();
        let mut slot = self.slot.lock().await;
        self.uninstall(&mut slot);
        let driver = self.spawner.start(&self.launch).await?;
        self.install(&mut slot, driver);
        tracing::info!(id = self.id, "restarted");
        Ok(self.info())
    }

    /// Kills the interpreter for good; cells queued after this fail.
    pub async fn delete(&self) {
        self.control().deleted = true;
        self.kill_running();
        let mut slot = self.slot.lock().await;
        self.uninstall(&mut slot);
    }

    /// Kills the interpreter of a running cell, which then ends.
    fn kill_running(&self) {
        let tree = self.control().tree.clone();
        if let Some(tree) = tree {
            tree.kill();
        }
    }
}

fn done(
    status: CellStatus,
    execution_count: u32,
    timed_out: bool,
    context_restarted: bool,
    started: Instant,
) -> CodeEvent {
    CodeEvent {
        event: Some(code_event::Event::Done(CellDone {
            status: status.into(),
            execution_count,
            timed_out,
            context_restarted,
            duration_us: u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
        })),
    }
}

/// Sends `before`, then `done`; a client that is gone gets nothing.
async fn finish(events: &Events, before: Vec<CodeEvent>, done: CodeEvent) {
    for event in before.into_iter().chain(std::iter::once(done)) {
        if events.send(Ok(event)).await.is_err() {
            return;
        }
    }
}
