//! IPython's shell escapes in a Python cell: a line `!CMD` (and `%pip ...`,
//! IPython's pip magic) runs CMD in a shell, its output going to the
//! cell's. Our interpreter is plain Python, so the front rewrites such a
//! line into a call of the same shell before the cell goes to the Code
//! service; the line's value is `None`, so a last line `!CMD` is no result,
//! as in IPython.
//!
//! The rewrite is by line: a `!` that begins a line (after indentation) is
//! never valid Python, except inside a multi-line string, which the rewrite
//! does not look into (a known limit, in docs/e2b.md). IPython's `$var`
//! and `{expr}` expansion in CMD is not done.

/// `code` with its shell-escape lines rewritten; `None` when it has none
/// (the cell goes as it is).
pub fn rewrite(code: &str) -> Option<String> {
    if !code.lines().any(|line| command(line).is_some()) {
        return None;
    }
    let mut out = String::with_capacity(code.len() + 64);
    for line in code.split_inclusive('\n') {
        let (body, end) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        match command(body) {
            Some((indent, command)) => {
                // A JSON string is a valid Python string literal.
                let literal = serde_json::Value::String(command).to_string();
                out.push_str(indent);
                out.push_str("(__import__('subprocess').run(");
                out.push_str(&literal);
                out.push_str(", shell=True), None)[1]");
            }
            None => out.push_str(body),
        }
        out.push_str(end);
    }
    Some(out)
}

/// The indentation and command of a shell-escape line.
fn command(line: &str) -> Option<(&str, String)> {
    let trimmed = line.trim_start_matches([' ', '\t']);
    let indent = &line[..line.len() - trimmed.len()];
    let trimmed = trimmed.trim_end_matches('\r');
    if let Some(command) = trimmed.strip_prefix('!') {
        return Some((indent, command.trim().to_owned()));
    }
    // `%pip install x` is `pip install x` for this interpreter.
    if let Some(rest) = trimmed.strip_prefix("%pip ") {
        return Some((indent, format!("pip {}", rest.trim())));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_without_escapes_is_left_alone() {
        assert_eq!(rewrite("x = 1\nx != 2\n"), None);
        assert_eq!(
            rewrite("%pip install six").as_deref(),
            Some("(__import__('subprocess').run(\"pip install six\", shell=True), None)[1]")
        );
        assert_eq!(rewrite("print('!')"), None);
    }

    #[test]
    fn an_escape_line_runs_in_a_shell_and_is_no_value() {
        assert_eq!(
            rewrite("!pip install six\nimport six").as_deref(),
            Some(
                "(__import__('subprocess').run(\"pip install six\", shell=True), None)[1]\n\
                 import six"
            )
        );
        assert_eq!(
            rewrite("if True:\n    !echo \"a\\b\"\n").as_deref(),
            Some(
                "if True:\n    (__import__('subprocess').run(\"echo \\\"a\\\\b\\\"\", shell=True), None)[1]\n"
            )
        );
    }
}
