//! Which running processes have a terminal: E2B's Connect gives their
//! output as `pty` data, but our process listing does not say which have
//! one, so the front remembers the ones it started (until their end).

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

fn set() -> &'static Mutex<HashSet<(String, u32)>> {
    static TERMINALS: OnceLock<Mutex<HashSet<(String, u32)>>> = OnceLock::new();
    TERMINALS.get_or_init(|| Mutex::new(HashSet::new()))
}

/// Process `pid` of `sandbox` has a terminal.
pub fn started(sandbox: &str, pid: u32) {
    if let Ok(mut set) = set().lock() {
        set.insert((sandbox.to_owned(), pid));
    }
}

/// Process `pid` of `sandbox` has ended.
pub fn ended(sandbox: &str, pid: u32) {
    if let Ok(mut set) = set().lock() {
        set.remove(&(sandbox.to_owned(), pid));
    }
}

/// Whether process `pid` of `sandbox` has a terminal.
pub fn has(sandbox: &str, pid: u32) -> bool {
    set()
        .lock()
        .map(|set| set.contains(&(sandbox.to_owned(), pid)))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_is_remembered_until_its_end() {
        started("sandbox-t", 7);
        assert!(has("sandbox-t", 7));
        assert!(!has("sandbox-t", 8));
        ended("sandbox-t", 7);
        assert!(!has("sandbox-t", 7));
    }
}
