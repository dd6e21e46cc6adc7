//! A file's logical lines: comments and blank lines dropped, lines ending
//! in `\` joined with the next (comment lines inside a continuation are
//! dropped, as Docker does), each with the number of the line it began on.

/// One instruction's text and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logical {
    pub line: usize,
    pub text: String,
}

/// The logical lines of `text`.
pub fn logical_lines(text: &str) -> Vec<Logical> {
    let mut out = Vec::new();
    let mut current: Option<Logical> = None;
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let trimmed = raw.trim_start();
        if trimmed.starts_with('#') {
            continue;
        }
        let (body, continues) = match raw.trim_end().strip_suffix('\\') {
            Some(body) => (body, true),
            None => (raw, false),
        };
        match current.as_mut() {
            Some(logical) => {
                logical.text.push(' ');
                logical.text.push_str(body.trim());
            }
            None if body.trim().is_empty() && !continues => {}
            None => {
                current = Some(Logical {
                    line: number,
                    text: body.trim().to_owned(),
                })
            }
        }
        if !continues {
            if let Some(logical) = current.take() {
                out.push(logical);
            }
        }
    }
    // A continuation on the last line ends the instruction.
    if let Some(logical) = current {
        out.push(logical);
    }
    out.retain(|logical| !logical.text.trim().is_empty());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(text: &str) -> Vec<(usize, String)> {
        logical_lines(text)
            .into_iter()
            .map(|l| (l.line, l.text))
            .collect()
    }

    #[test]
    fn comments_blanks_and_continuations() {
        let file = "# a comment\n\nFROM default\nRUN apt-get update && \\\n    # inside\n    apt-get install -y x\n  ENV A=1\n";
        assert_eq!(
            texts(file),
            vec![
                (3, "FROM default".to_owned()),
                (4, "RUN apt-get update && apt-get install -y x".to_owned()),
                (7, "ENV A=1".to_owned()),
            ]
        );
    }

    #[test]
    fn a_trailing_continuation_ends_the_file() {
        assert_eq!(texts("RUN a \\"), vec![(1, "RUN a".to_owned())]);
        assert_eq!(texts("\\\n\\\n"), Vec::<(usize, String)>::new());
    }
}
