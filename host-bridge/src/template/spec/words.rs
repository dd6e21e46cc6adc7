//! Words and variables as Docker reads them in `ENV`, `COPY`, `WORKDIR`
//! and the like: whitespace separates words, single and double quotes and
//! backslashes group, and `$NAME`, `${NAME}`, `${NAME:-word}` and
//! `${NAME:+word}` are replaced from the `ARG` and `ENV` values in force
//! (`\$` is a literal dollar).

use std::collections::BTreeMap;

/// Why a word list could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WordError {
    #[error("unterminated {0} quote")]
    Unterminated(char),
    #[error("unterminated ${{...}}")]
    UnterminatedBrace,
    #[error("bad variable name in ${{{0}}}")]
    BadName(String),
}

/// Splits `text` into words, substituting variables from `vars`.
pub fn split(text: &str, vars: &BTreeMap<String, String>) -> Result<Vec<String>, WordError> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(WordError::Unterminated('\'')),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$')) => word.push(c),
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(WordError::Unterminated('"')),
                        },
                        Some('$') => substitute(&mut chars, vars, &mut word)?,
                        Some(c) => word.push(c),
                        None => return Err(WordError::Unterminated('"')),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(c) = chars.next() {
                    word.push(c);
                }
            }
            '$' => {
                in_word = true;
                substitute(&mut chars, vars, &mut word)?;
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

/// `text` with its variables substituted, quotes and spacing kept as they
/// are (for `FROM` and `READY cmd`, whose text is used whole).
pub fn expand(text: &str, vars: &BTreeMap<String, String>) -> Result<String, WordError> {
    let mut out = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'$') => {
                chars.next();
                out.push('$');
            }
            '$' => substitute(&mut chars, vars, &mut out)?,
            c => out.push(c),
        }
    }
    Ok(out)
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Reads a variable reference after its `$` and appends its value.
fn substitute(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    vars: &BTreeMap<String, String>,
    out: &mut String,
) -> Result<(), WordError> {
    if chars.peek() == Some(&'{') {
        chars.next();
        let mut inner = String::new();
        loop {
            match chars.next() {
                Some('}') => break,
                Some(c) => inner.push(c),
                None => return Err(WordError::UnterminatedBrace),
            }
        }
        let (name, modifier) = match inner.find(":-").or_else(|| inner.find(":+")) {
            Some(at) => (&inner[..at], Some((&inner[at..at + 2], &inner[at + 2..]))),
            None => (inner.as_str(), None),
        };
        if name.is_empty() || !name.chars().all(is_name_char) {
            return Err(WordError::BadName(inner.clone()));
        }
        let value = vars.get(name).filter(|v| !v.is_empty());
        match (modifier, value) {
            (None, Some(value)) => out.push_str(value),
            (None, None) => {}
            (Some((":-", _)), Some(value)) => out.push_str(value),
            (Some((":-", word)), None) => out.push_str(word),
            (Some((_, word)), Some(_)) => out.push_str(word),
            (Some(_), None) => {}
        }
        return Ok(());
    }
    let mut name = String::new();
    while let Some(&c) = chars.peek() {
        if !is_name_char(c) {
            break;
        }
        name.push(c);
        chars.next();
    }
    if name.is_empty() {
        out.push('$');
    } else if let Some(value) = vars.get(&name) {
        out.push_str(value);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> BTreeMap<String, String> {
        [("V", "1.2"), ("EMPTY", ""), ("SP", "a b")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect()
    }

    #[test]
    fn words_quotes_and_escapes() {
        let words = split(r#"a "b c" 'd $V' e\ f "g\"h""#, &vars()).unwrap();
        assert_eq!(words, vec!["a", "b c", "d $V", "e f", "g\"h"]);
    }

    #[test]
    fn variables() {
        let v = vars();
        assert_eq!(split("x-$V ${V}y", &v).unwrap(), vec!["x-1.2", "1.2y"]);
        assert_eq!(
            split("${NONE:-dflt} ${V:+set}", &v).unwrap(),
            vec!["dflt", "set"]
        );
        assert_eq!(split("${EMPTY:-e}$NONE", &v).unwrap(), vec!["e"]);
        assert_eq!(split("\"$SP\"", &v).unwrap(), vec!["a b"]);
        assert_eq!(split("\\$V $", &v).unwrap(), vec!["$V", "$"]);
        assert_eq!(expand("img:${V} \\$V", &v).unwrap(), "img:1.2 $V");
    }

    #[test]
    fn malformed() {
        assert_eq!(split("'a", &vars()), Err(WordError::Unterminated('\'')));
        assert_eq!(split("\"a", &vars()), Err(WordError::Unterminated('"')));
        assert_eq!(split("${V", &vars()), Err(WordError::UnterminatedBrace));
        assert!(matches!(
            split("${a-b}", &vars()),
            Err(WordError::BadName(_))
        ));
    }
}
