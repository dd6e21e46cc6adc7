//! Named checks on one shared VM, for test targets with `harness = false`.
//!
//! A test file lists its checks, `async fn name(sandbox: &Sandbox)` each,
//! with [`checks!`](crate::checks); [`Suite`] turns every check into a
//! [`libtest_mimic`] trial named after it, so a failure names what broke and
//! `cargo test --test FILE -- NAME` runs one check alone. The VM boots on
//! the first check that runs (none boots for `--list` or a filter that
//! matches no check) and is shut down before the process exits. A check
//! that panics fails its own trial only; if the boot fails, every check
//! fails with the boot's message.
//!
//! ```no_run
//! use airlock_tests::shared_vm::{Order, Suite};
//!
//! async fn echo_echoes(sandbox: &airlock::Sandbox) {
//!     assert_eq!(airlock_tests::stdout_of(sandbox, "echo hi").await, "hi\n");
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     Suite::new(airlock_tests::boot, Order::Parallel)
//!         .checks(airlock_tests::checks![echo_echoes])
//!         .run()
//! }
//! ```

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use airlock::Sandbox;
use futures::future::LocalBoxFuture;
use futures::FutureExt;
use libtest_mimic::{Arguments, Failed, Trial};
use tokio::sync::OnceCell;

/// How long the shared VM has to power off at the end.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// A check's body: runs against the shared sandbox, panics on failure.
pub type CheckFn = for<'a> fn(&'a Sandbox) -> LocalBoxFuture<'a, ()>;

/// One named check on the shared VM; [`checks!`](crate::checks) makes them.
#[derive(Debug, Clone, Copy)]
pub struct Check {
    name: &'static str,
    body: CheckFn,
}

impl Check {
    /// A check called `name` (its trial's name) that runs `body`.
    pub fn new(name: &'static str, body: CheckFn) -> Self {
        Self { name, body }
    }
}

/// `checks![a, b]`: a `Vec<Check>` of the async fns `a` and `b`, each taking
/// `&Sandbox` and named after its function.
#[macro_export]
macro_rules! checks {
    ($($check:ident),+ $(,)?) => {
        vec![$(
            $crate::shared_vm::Check::new(stringify!($check), |sandbox| {
                ::std::boxed::Box::pin($check(sandbox))
            })
        ),+]
    };
}

/// Whether the checks of a suite may run at the same time on the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    /// One after another, in the listed order, whatever `--test-threads`
    /// says: for checks that measure the VM or fill it.
    Sequential,
    /// On libtest's usual thread pool (`--test-threads`).
    Parallel,
}

/// The test suite of one file: its checks on one shared VM, plus tests that
/// need none.
pub struct Suite {
    shared: Arc<Shared>,
    order: Order,
    checks: Vec<Check>,
    others: Vec<Trial>,
}

impl std::fmt::Debug for Suite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Suite")
            .field("order", &self.order)
            .field("checks", &self.checks)
            .field("others", &self.others.len())
            .finish_non_exhaustive()
    }
}

/// What the trials share: how to boot the VM, and the VM once booted (or
/// why it did not boot).
struct Shared {
    boot: Box<dyn Fn() -> LocalBoxFuture<'static, Sandbox> + Send + Sync>,
    vm: OnceCell<Result<Sandbox, String>>,
}

impl Shared {
    /// The shared sandbox, booted by the first caller.
    async fn sandbox(&self) -> Result<&Sandbox, Failed> {
        let vm = self
            .vm
            .get_or_init(|| async {
                AssertUnwindSafe((self.boot)())
                    .catch_unwind()
                    .await
                    .map_err(|panic| panic_message(panic.as_ref()))
            })
            .await;
        vm.as_ref()
            .map_err(|reason| format!("the shared VM did not boot: {reason}").into())
    }
}

impl Suite {
    /// A suite whose VM `boot` starts (and panics if it cannot), running its
    /// checks in `order`.
    pub fn new<F, Fut>(boot: F, order: Order) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Sandbox> + 'static,
    {
        let boot = move || -> LocalBoxFuture<'static, Sandbox> { Box::pin(boot()) };
        Self {
            shared: Arc::new(Shared {
                boot: Box::new(boot),
                vm: OnceCell::new(),
            }),
            order,
            checks: Vec::new(),
            others: Vec::new(),
        }
    }

    /// Adds checks that run on the shared VM.
    pub fn checks(mut self, checks: Vec<Check>) -> Self {
        self.checks.extend(checks);
        self
    }

    /// Adds a test that needs no shared VM (it may boot its own), run after
    /// the checks when the order is sequential.
    pub fn test(mut self, name: &'static str, body: fn()) -> Self {
        self.others.push(Trial::test(name, move || {
            body();
            Ok(())
        }));
        self
    }

    /// Parses libtest's command line, runs the selected trials, shuts the
    /// VM down and returns the exit code (101 if a trial failed or the VM
    /// did not shut down cleanly).
    pub fn run(self) -> ExitCode {
        let mut args = Arguments::from_args();
        if self.order == Order::Sequential {
            args.test_threads = Some(1);
        }
        let runtime = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => panic!("tokio runtime: {error}"),
        };
        let trials = self
            .checks
            .iter()
            .map(|check| {
                let (shared, tokio) = (Arc::clone(&self.shared), runtime.handle().clone());
                let body = check.body;
                Trial::test(check.name, move || {
                    tokio.block_on(async {
                        body(shared.sandbox().await?).await;
                        Ok(())
                    })
                })
            })
            .chain(self.others)
            .collect();
        let conclusion = libtest_mimic::run(&args, trials);

        // The trials are gone, so this is the last reference.
        let vm = Arc::into_inner(self.shared).and_then(|shared| shared.vm.into_inner());
        let shut_down = match vm {
            Some(Ok(sandbox)) => runtime.block_on(sandbox.shutdown(SHUTDOWN_GRACE)),
            _ => Ok(()),
        };
        match shut_down {
            Ok(()) => conclusion.exit_code(),
            Err(error) => {
                eprintln!("error: the shared VM did not shut down: {error}");
                ExitCode::from(101)
            }
        }
    }
}

/// The message a panic was raised with, as libtest prints it.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or("panicked")
        .to_owned()
}
