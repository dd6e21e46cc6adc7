//! A sandbox's owner in another process, for tests of what outlives it:
//! the test binary runs itself again as the owner, which starts a
//! sandbox, says `ready ...` on its stdout and then waits to be killed.
//!
//! A test file with `harness = false` starts its `main` with
//! [`role`]: in the owner it is `Some(role)` and the file runs that role;
//! otherwise it runs its tests with [`run`] (each in a runtime of its own,
//! one at a time, as named trials: `cargo test --test FILE -- NAME` runs
//! one). The test spawns the owner with [`Owner::spawn`], reads its
//! announcement with [`Owner::ready`] and kills it with SIGKILL
//! ([`Owner::kill`]), as a crash would. [`Leftovers`] ends what a failed
//! test left running (an orphan nobody adopted).

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use futures::future::LocalBoxFuture;
use libtest_mimic::{Arguments, Trial};

/// The environment variable naming the owner's role.
const ROLE_ENV: &str = "AIRLOCK_TEST_OWNER_ROLE";

/// In the owner process: its role; in the test process: `None`.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// In the owner: says it is ready, with `fields` (an id, a figure...),
/// on one line of stdout.
pub fn announce(fields: &[&str]) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "ready {}", fields.join(" "));
    let _ = stdout.flush();
}

/// In the owner: waits until it is killed.
pub fn hold() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// Runs `future` to its end on a runtime of its own.
pub fn block_on<F: Future>(future: F) -> F::Output {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime.block_on(future),
        Err(error) => panic!("tokio runtime: {error}"),
    }
}

/// The owner process, seen from the test.
#[derive(Debug)]
pub struct Owner {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Owner {
    /// Runs this test binary again as the owner in `role`, with `envs`
    /// added to its environment.
    pub fn spawn(role: &str, envs: &[(&str, String)]) -> Owner {
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(error) => panic!("the test binary: {error}"),
        };
        let mut command = Command::new(exe);
        command
            .env(ROLE_ENV, role)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in envs {
            command.env(key, value);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(error) => panic!("cannot start the owner: {error}"),
        };
        let Some(stdout) = child.stdout.take() else {
            panic!("the owner's stdout is not piped")
        };
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || forward(stdout, send));
        Owner { child, lines }
    }

    /// The fields the owner announced (`ready a b` gives `[a, b]`), once it
    /// has, within `limit`.
    pub fn ready(&mut self, limit: Duration) -> Vec<String> {
        loop {
            match self.lines.recv_timeout(limit) {
                Ok(line) => {
                    if let Some(fields) = line.strip_prefix("ready") {
                        return fields.split_whitespace().map(str::to_owned).collect();
                    }
                }
                Err(error) => {
                    let exited = self.child.try_wait().ok().flatten();
                    panic!("the owner did not announce itself within {limit:?} ({error}; exit: {exited:?})")
                }
            }
        }
    }

    /// Kills the owner with SIGKILL and reaps it: what a crash or
    /// `kill -9` does.
    pub fn kill(mut self) {
        if let Err(error) = self.child.kill() {
            panic!("cannot SIGKILL the owner: {error}");
        }
        let _ = self.child.wait();
    }
}

impl Drop for Owner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn forward(stdout: ChildStdout, lines: mpsc::Sender<String>) {
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { return };
        if lines.send(line).is_err() {
            return;
        }
    }
}

/// Kills, when dropped, every process whose command line names a path
/// under `dir` (the VMMs and agents of the sandboxes there, or programs
/// that write there): a test that fails before it adopts an orphan leaves
/// nothing running.
#[derive(Debug)]
pub struct Leftovers(PathBuf);

impl Leftovers {
    /// Guards the processes that name `dir`.
    pub fn under(dir: &Path) -> Leftovers {
        Leftovers(dir.to_owned())
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        for pid in crate::processes_mentioning(&self.0) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// One named test of a file run with [`run`].
pub type TestFn = fn() -> LocalBoxFuture<'static, ()>;

/// `tests![a, b]`: the async fns `a` and `b` (no arguments) as
/// `(name, TestFn)` pairs for [`run`].
#[macro_export]
macro_rules! owner_tests {
    ($($test:ident),+ $(,)?) => {
        vec![$(
            (stringify!($test), (|| ::std::boxed::Box::pin($test())) as $crate::owner::TestFn)
        ),+]
    };
}

/// Parses libtest's command line and runs `tests` one at a time (they
/// boot VMs and count processes), each on a runtime of its own.
pub fn run(tests: Vec<(&'static str, TestFn)>) -> ExitCode {
    crate::log_if_asked();
    let mut args = Arguments::from_args();
    args.test_threads = Some(1);
    let trials = tests
        .into_iter()
        .map(|(name, body)| {
            Trial::test(name, move || {
                block_on(body());
                Ok(())
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
