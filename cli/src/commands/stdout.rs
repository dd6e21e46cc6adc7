//! A command's answer on stdout. A reader that goes away before the end
//! (`airlock template ls | head -1`) ends the output quietly, as it does
//! for other Unix tools; `print!` would panic there, since Rust ignores
//! SIGPIPE (and the CLI keeps it ignored: a client writing to the server's
//! socket must see an error, not die).

use std::io::{self, Write};

/// Writes `text` to stdout whole, or as much as a reader took before it
/// went away.
pub fn print(text: &str) {
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => {}
        Err(error) => eprintln!("airlock: writing to stdout: {error}"),
    }
}
