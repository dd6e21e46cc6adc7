//! `airlock shell` as a user at a terminal sees it: tmux is the terminal
//! (its window the user's screen, its keys the user's typing), so the
//! host side runs in raw mode on a real pseudo-terminal and gets SIGWINCH
//! when the window is resized. And `airlock shell` without a terminal.

// A test panics with its reason; that is what expect is for here.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// How long the screen may take to show something: a VM boot under TCG on
/// a busy two-core machine included.
const PATIENCE: Duration = Duration::from_secs(120);

/// A tmux server of its own with one window running `command`; killed on
/// drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn start(command: &str, cols: u16, rows: u16) -> Tmux {
        let version = Command::new("tmux").arg("-V").output();
        assert!(
            version.is_ok_and(|v| v.status.success()),
            "tmux not found: run scripts/setup (it installs Debian's tmux)"
        );
        let tmux = Tmux {
            socket: format!("airlock-shell-test-{}", std::process::id()),
        };
        tmux.run(&[
            "new-session",
            "-d",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
            command,
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> Output {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("run tmux");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Types `text` and Enter.
    fn type_line(&self, text: &str) {
        self.run(&["send-keys", "-l", text]);
        self.run(&["send-keys", "Enter"]);
    }

    /// Presses a key as tmux names it (`C-c`).
    fn press(&self, key: &str) {
        self.run(&["send-keys", key]);
    }

    fn resize(&self, cols: u16, rows: u16) {
        self.run(&[
            "resize-window",
            "-x",
            &cols.to_string(),
            "-y",
            &rows.to_string(),
        ]);
    }

    /// The screen and its scrollback, wrapped lines joined.
    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-J", "-S", "-"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until a line of the screen (from line `from` on) satisfies
    /// `want`; returns the index of the line after it.
    fn wait_line(&self, from: usize, what: &str, want: impl Fn(&str) -> bool) -> usize {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let screen = self.screen();
            let found = screen
                .lines()
                .enumerate()
                .skip(from)
                .find(|(_, line)| want(line.trim_end()));
            if let Some((i, _)) = found {
                return i + 1;
            }
            assert!(
                Instant::now() < deadline,
                "no line {what} on the screen:\n{screen}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for a line that is exactly `text`.
    fn wait_exact(&self, from: usize, text: &str) -> usize {
        self.wait_line(from, &format!("{text:?}"), |line| line == text)
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

#[test]
fn a_shell_at_a_terminal_is_typed_at_resized_interrupted_and_exits() {
    let airlock = airlock_tests::airlock_bin();
    // After airlock: its exit code, and the terminal's settings, which must
    // be back to cooked mode.
    let command = format!(
        "{} shell --no-image --memory 256 -e PS1='airlock-test$ '; \
         echo airlock-exit=$?; stty -a | tr ' ;' '\\n\\n' | grep -x -e icanon -e echo -e -icanon -e -echo | tr '\\n' ' '; \
         echo; sleep 600",
        airlock.display()
    );
    let tmux = Tmux::start(&command, 100, 30);
    let prompt = |line: &str| line.starts_with("airlock-test$");
    let mut at = tmux.wait_line(0, "with the prompt", prompt);

    tmux.type_line("echo hello $((6 * 7))");
    at = tmux.wait_exact(at, "hello 42");

    // The guest's terminal has the window's size, and follows it.
    tmux.type_line("stty size");
    at = tmux.wait_exact(at, "30 100");
    tmux.resize(120, 40);
    std::thread::sleep(Duration::from_millis(500));
    tmux.type_line("stty size");
    at = tmux.wait_exact(at, "40 120");

    // ^C interrupts the running job and the shell carries on.
    tmux.type_line("echo sleeping; sleep 1000");
    at = tmux.wait_exact(at, "sleeping");
    std::thread::sleep(Duration::from_millis(500));
    tmux.press("C-c");
    tmux.type_line("echo status=$?");
    at = tmux.wait_exact(at, "status=130");

    // The shell's exit status is airlock's, and the terminal is restored.
    tmux.type_line("exit 3");
    at = tmux.wait_exact(at, "airlock-exit=3");
    tmux.wait_line(at, "showing icanon and echo", |line| {
        let flags: Vec<&str> = line.split_whitespace().collect();
        flags.contains(&"icanon") && flags.contains(&"echo")
    });
}

#[test]
fn a_shell_without_a_terminal_is_refused_naming_airlock_run() {
    // Refused before any VM boots.
    let out = Command::new(airlock_tests::airlock_bin())
        .args(["shell", "--no-image"])
        .stdin(Stdio::null())
        .output()
        .expect("run airlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "stderr: {stderr}");
    assert!(stderr.contains("airlock run"), "stderr: {stderr}");
}
