//! An error and its causes on one line, `outer: inner: innermost`.
//!
//! Every crate of the workspace prints error chains through this one
//! formatter, so a log line, a gRPC status message and an MCP tool's answer
//! say the same thing for the same error. A cause whose text the line already
//! holds is left out: `thiserror`'s `#[error(transparent)]` and messages that
//! embed their source (`"reading {path}: {source}"`) would otherwise print it
//! twice.
#![forbid(unsafe_code)]

use std::error::Error;
use std::fmt;

/// Formats `error` and each of its sources as `outer: inner: innermost`.
pub fn chain(error: &(dyn Error + '_)) -> String {
    Chain(error).to_string()
}

/// [`chain`] as a [`fmt::Display`] value, for `format!` and `tracing`
/// fields without building the string first.
#[derive(Clone, Copy)]
pub struct Chain<'a>(pub &'a (dyn Error + 'a));

impl fmt::Debug for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let cause_text = cause.to_string();
            if !text.contains(&cause_text) {
                text.push_str(": ");
                text.push_str(&cause_text);
            }
            source = cause.source();
        }
        f.write_str(&text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Layer {
        text: &'static str,
        source: Option<Box<Layer>>,
    }

    impl fmt::Display for Layer {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.text)
        }
    }

    impl Error for Layer {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            self.source.as_deref().map(|s| s as &(dyn Error + 'static))
        }
    }

    fn layers(texts: &[&'static str]) -> Layer {
        let mut texts = texts.iter().rev();
        let mut error = Layer {
            text: texts.next().copied().unwrap_or_default(),
            source: None,
        };
        for text in texts {
            error = Layer {
                text,
                source: Some(Box::new(error)),
            };
        }
        error
    }

    #[test]
    fn every_cause_once_outermost_first() {
        let error = layers(&["starting sandbox", "reading /x", "permission denied"]);
        assert_eq!(
            chain(&error),
            "starting sandbox: reading /x: permission denied"
        );
    }

    #[test]
    fn a_cause_the_message_already_holds_is_not_repeated() {
        let error = layers(&["reading /x: permission denied", "permission denied"]);
        assert_eq!(chain(&error), "reading /x: permission denied");
        let alone = layers(&["no source"]);
        assert_eq!(format!("{}", Chain(&alone)), "no source");
    }
}
