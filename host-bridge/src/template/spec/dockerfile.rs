//! The Dockerfile subset: `FROM`, `RUN`, `COPY`, `ADD`, `ENV`, `WORKDIR`,
//! `USER`, `ARG`, and our `START` and `READY`. Anything else is an error
//! naming its line: a build never skips what it was asked to do.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use super::lines::{logical_lines, Logical};
use super::words::{expand, split, WordError};
use super::{Base, CopyStep, Program, Ready, ReadyCheck, Step, StepKind, TemplateSpec};

/// Why a template file was refused; always names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    /// 1-based; 0 for the file as a whole.
    pub line: usize,
    pub message: String,
}

fn fail<T>(line: usize, message: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError {
        line,
        message: message.into(),
    })
}

/// The instructions of the subset.
const KNOWN: &[&str] = &[
    "FROM", "ARG", "RUN", "COPY", "ADD", "ENV", "WORKDIR", "USER", "START", "READY",
];

/// The Debian suites `FROM debian:SUITE` builds with debootstrap.
const DEBIAN_SUITES: &[&str] = &["bookworm", "trixie", "bullseye"];

/// What is read so far.
struct Reader<'a> {
    build_args: &'a BTreeMap<String, String>,
    /// `ARG` values in force.
    args: BTreeMap<String, String>,
    /// `ENV` values in force (for substitution; they win over `ARG`s).
    env: BTreeMap<String, String>,
    base: Option<Base>,
    steps: Vec<Step>,
    start: Option<Program>,
    ready: Option<Ready>,
}

/// Reads `text`; `build_args` override `ARG` defaults.
pub fn parse(
    text: &str,
    build_args: &BTreeMap<String, String>,
) -> Result<TemplateSpec, ParseError> {
    let mut reader = Reader {
        build_args,
        args: BTreeMap::new(),
        env: BTreeMap::new(),
        base: None,
        steps: Vec::new(),
        start: None,
        ready: None,
    };
    for logical in logical_lines(text) {
        reader.instruction(&logical)?;
    }
    let Some(base) = reader.base else {
        return fail(
            0,
            "no FROM: a template file starts with FROM (after any ARG)",
        );
    };
    if reader.ready.is_some() && reader.start.is_none() {
        return fail(0, "READY without START: READY checks what START started");
    }
    Ok(TemplateSpec {
        base,
        steps: reader.steps,
        start: reader.start,
        ready: reader.ready,
        allow_net: Vec::new(),
    })
}

impl Reader<'_> {
    fn vars(&self) -> BTreeMap<String, String> {
        let mut vars = self.args.clone();
        vars.extend(self.env.clone());
        vars
    }

    fn words(&self, line: usize, text: &str) -> Result<Vec<String>, ParseError> {
        split(text, &self.vars()).map_err(|e| word_error(line, e))
    }

    fn instruction(&mut self, logical: &Logical) -> Result<(), ParseError> {
        let line = logical.line;
        let (keyword, rest) = match logical.text.split_once(char::is_whitespace) {
            Some((keyword, rest)) => (keyword, rest.trim()),
            None => (logical.text.as_str(), ""),
        };
        let keyword = keyword.to_ascii_uppercase();
        if !KNOWN.contains(&keyword.as_str()) {
            return fail(line, unsupported(&keyword));
        }
        if self.base.is_none() && !matches!(keyword.as_str(), "FROM" | "ARG") {
            return fail(
                line,
                format!("{keyword} before FROM: start the file with FROM"),
            );
        }
        if rest.is_empty() {
            return fail(line, format!("{keyword} needs arguments"));
        }
        match keyword.as_str() {
            "FROM" => self.from(line, rest),
            "ARG" => self.arg(line, rest),
            "RUN" => {
                let program = program(line, rest)?;
                self.push(line, StepKind::Run(program));
                Ok(())
            }
            "COPY" => self.copy(line, rest, false),
            "ADD" => self.copy(line, rest, true),
            "ENV" => self.env(line, rest),
            "WORKDIR" => {
                let dir = self.single(line, "WORKDIR", rest)?;
                self.push(line, StepKind::Workdir(dir));
                Ok(())
            }
            "USER" => {
                let user = self.single(line, "USER", rest)?;
                self.push(line, StepKind::User(user));
                Ok(())
            }
            "START" => {
                if self.start.is_some() {
                    return fail(line, "a second START: a template starts one program");
                }
                self.start = Some(program(line, rest)?);
                Ok(())
            }
            "READY" => {
                if self.ready.is_some() {
                    return fail(line, "a second READY: a template waits for one check");
                }
                self.ready = Some(self.ready(line, rest)?);
                Ok(())
            }
            other => fail(line, unsupported(other)),
        }
    }

    fn push(&mut self, line: usize, kind: StepKind) {
        self.steps.push(Step {
            kind,
            line: Some(line),
            args: self.args.clone(),
        });
    }

    fn single(&self, line: usize, what: &str, rest: &str) -> Result<String, ParseError> {
        match self.words(line, rest)?.as_slice() {
            [one] if !one.is_empty() => Ok(one.clone()),
            _ => fail(line, format!("{what} takes one value")),
        }
    }

    fn from(&mut self, line: usize, rest: &str) -> Result<(), ParseError> {
        if self.base.is_some() {
            return fail(
                line,
                "a second FROM: multi-stage builds are not supported; use one FROM",
            );
        }
        let words = self.words(line, rest)?;
        let reference = match words.as_slice() {
            [reference] => reference.clone(),
            [_, as_, _] if as_.eq_ignore_ascii_case("as") => {
                return fail(line, "FROM ... AS: multi-stage builds are not supported")
            }
            _ => return fail(line, "FROM takes one image"),
        };
        if words.iter().any(|w| w.starts_with("--")) {
            return fail(line, "FROM takes no flags (--platform and the like)");
        }
        self.base = Some(base(line, &reference)?);
        Ok(())
    }

    fn arg(&mut self, line: usize, rest: &str) -> Result<(), ParseError> {
        for word in self.words(line, rest)? {
            let (name, default) = match word.split_once('=') {
                Some((name, value)) => (name.to_owned(), Some(value.to_owned())),
                None => (word.clone(), None),
            };
            check_name(line, "ARG", &name)?;
            let value = self
                .build_args
                .get(&name)
                .cloned()
                .or(default)
                .unwrap_or_default();
            self.args.insert(name, value);
        }
        Ok(())
    }

    fn env(&mut self, line: usize, rest: &str) -> Result<(), ParseError> {
        let words = self.words(line, rest)?;
        let pairs = if words.first().is_some_and(|w| w.contains('=')) {
            let mut pairs = Vec::new();
            for word in &words {
                let Some((key, value)) = word.split_once('=') else {
                    return fail(line, format!("ENV {word}: write KEY=VALUE"));
                };
                pairs.push((key.to_owned(), value.to_owned()));
            }
            pairs
        } else {
            // The old form: `ENV KEY the rest of the line`.
            let Some((key, value)) = rest.split_once(char::is_whitespace) else {
                return fail(line, "ENV needs KEY=VALUE");
            };
            let value = split(value, &self.vars())
                .map_err(|e| word_error(line, e))?
                .join(" ");
            vec![(key.to_owned(), value)]
        };
        for (key, value) in &pairs {
            check_name(line, "ENV", key)?;
            if value.contains('\0') || value.contains('\n') {
                return fail(
                    line,
                    format!("ENV {key}: a value cannot hold a newline or NUL"),
                );
            }
            self.env.insert(key.clone(), value.clone());
        }
        self.push(line, StepKind::Env(pairs));
        Ok(())
    }

    fn copy(&mut self, line: usize, rest: &str, add: bool) -> Result<(), ParseError> {
        let what = if add { "ADD" } else { "COPY" };
        let mut words = if rest.starts_with('[') {
            match serde_json::from_str::<Vec<String>>(rest) {
                Ok(words) => words,
                Err(_) => return fail(line, format!("{what} [...]: a JSON array of strings")),
            }
        } else {
            self.words(line, rest)?
        };
        let mut chown = None;
        let mut chmod = None;
        while words.first().is_some_and(|w| w.starts_with("--")) {
            let flag = words.remove(0);
            match flag.split_once('=') {
                Some(("--chown", value)) if !value.is_empty() => chown = Some(value.to_owned()),
                Some(("--chmod", value)) => match u32::from_str_radix(value, 8) {
                    Ok(mode) if mode <= 0o7777 => chmod = Some(mode),
                    _ => return fail(line, format!("{flag}: an octal mode such as 0755")),
                },
                Some(("--from", _)) => {
                    return fail(
                        line,
                        format!("{what} --from: multi-stage builds are not supported"),
                    )
                }
                _ => {
                    return fail(
                        line,
                        format!("{what} {flag}: not supported (only --chown and --chmod)"),
                    )
                }
            }
        }
        let Some(dest) = words.pop() else {
            return fail(line, format!("{what} needs a source and a destination"));
        };
        if words.is_empty() {
            return fail(line, format!("{what} needs a source and a destination"));
        }
        for source in &words {
            if source.contains("://") {
                return fail(
                    line,
                    format!(
                        "{what} {source}: no downloads at build time; fetch it onto the host \
                         into the context directory and COPY it"
                    ),
                );
            }
            if add && is_archive(source) {
                return fail(
                    line,
                    format!(
                        "ADD {source}: archives are not unpacked here; COPY it and RUN tar -xf"
                    ),
                );
            }
            if source.contains(['*', '?', '[']) {
                return fail(
                    line,
                    format!("{what} {source}: wildcards are not supported; name the files"),
                );
            }
            if std::path::Path::new(source)
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir))
            {
                return fail(
                    line,
                    format!("{what} {source}: a source outside the context directory"),
                );
            }
        }
        self.push(
            line,
            StepKind::Copy(CopyStep {
                sources: words,
                dest,
                chown,
                chmod,
            }),
        );
        Ok(())
    }

    fn ready(&self, line: usize, rest: &str) -> Result<Ready, ParseError> {
        let mut rest = rest.trim();
        let mut timeout = super::DEFAULT_READY_TIMEOUT;
        while let Some(flagged) = rest.strip_prefix("--") {
            let (flag, after) = flagged
                .split_once(char::is_whitespace)
                .unwrap_or((flagged, ""));
            match flag.split_once('=') {
                Some(("timeout", value)) => timeout = duration(line, value)?,
                _ => return fail(line, format!("READY --{flag}: only --timeout=DURATION")),
            }
            rest = after.trim_start();
        }
        let (kind, argument) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        let argument = argument.trim();
        let usage = "READY [--timeout=60s] port N | file PATH | cmd COMMAND | url URL";
        if argument.is_empty() {
            return fail(line, format!("READY {kind}: {usage}"));
        }
        let vars = self.vars();
        let check = match kind.to_ascii_lowercase().as_str() {
            "port" => match argument.parse::<u16>() {
                Ok(port) if port > 0 => ReadyCheck::Port(port),
                _ => {
                    return fail(
                        line,
                        format!("READY port {argument}: a port from 1 to 65535"),
                    )
                }
            },
            "file" => ReadyCheck::File(self.single(line, "READY file", argument)?),
            "cmd" => ReadyCheck::Cmd(expand(argument, &vars).map_err(|e| word_error(line, e))?),
            "url" => {
                let url = self.single(line, "READY url", argument)?;
                if !url.starts_with("http://") {
                    return fail(
                        line,
                        format!("READY url {url}: an http:// URL the guest serves"),
                    );
                }
                ReadyCheck::Url(url)
            }
            _ => return fail(line, usage),
        };
        Ok(Ready { check, timeout })
    }
}

/// `RUN` and `START`: the exec form (a JSON array) or the shell form.
fn program(line: usize, rest: &str) -> Result<Program, ParseError> {
    if rest.starts_with('[') {
        // As Docker: text that is not a JSON array of strings is shell form.
        if let Ok(argv) = serde_json::from_str::<Vec<String>>(rest) {
            if argv.is_empty() || argv[0].is_empty() {
                return fail(line, "an empty exec form: name a program");
            }
            if argv.iter().any(|a| a.contains('\0')) {
                return fail(line, "an argument holds NUL");
            }
            return Ok(Program::Exec(argv));
        }
    }
    if rest.contains('\0') {
        return fail(line, "the command holds NUL");
    }
    if rest.starts_with("--") {
        return fail(
            line,
            "RUN flags (--mount, --network, ...) are not supported",
        );
    }
    Ok(Program::Shell(rest.to_owned()))
}

/// `FROM`'s reference as a base.
fn base(line: usize, reference: &str) -> Result<Base, ParseError> {
    if reference.starts_with('/') || reference.starts_with("./") || reference.starts_with("../") {
        return Ok(Base::Path(PathBuf::from(reference)));
    }
    if let Some(suite) = reference.strip_prefix("debian:") {
        if DEBIAN_SUITES.contains(&suite) {
            return Ok(Base::Debian(suite.to_owned()));
        }
    }
    if reference == "scratch" {
        return fail(
            line,
            "FROM scratch: start from an Airlock image (airlock image ls)",
        );
    }
    let valid_name = reference
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if valid_name && !reference.is_empty() {
        return Ok(Base::Image(reference.to_owned()));
    }
    fail(
        line,
        format!(
            "FROM {reference}: Airlock pulls from no registry; name an image from `airlock image ls`, \
             debian:bookworm (built with debootstrap), or the path of an OCI layout, a `docker save` \
             archive or a root tarball (e.g. ./image.tar, after `docker save` or `skopeo copy` on a \
             machine that has the image)"
        ),
    )
}

fn is_archive(source: &str) -> bool {
    [".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.bz2", ".tar.zst"]
        .iter()
        .any(|ext| source.ends_with(ext))
}

fn check_name(line: usize, what: &str, name: &str) -> Result<(), ParseError> {
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        fail(
            line,
            format!("{what} {name:?}: a name of letters, digits and _"),
        )
    }
}

/// `30s`, `2m`, `500ms`, `1h`; a bare number is seconds.
fn duration(line: usize, text: &str) -> Result<Duration, ParseError> {
    let (digits, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let bad = || fail(line, format!("{text}: a duration such as 30s, 2m or 500ms"));
    let Ok(n) = digits.parse::<u64>() else {
        return bad();
    };
    let duration = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => return bad(),
    };
    if duration.is_zero() {
        return bad();
    }
    Ok(duration)
}

fn word_error(line: usize, error: WordError) -> ParseError {
    ParseError {
        line,
        message: error.to_string(),
    }
}

/// What to say about an instruction this subset does not have.
fn unsupported(keyword: &str) -> String {
    let hint = match keyword {
        "CMD" | "ENTRYPOINT" => "use START for a program that runs in every sandbox",
        "EXPOSE" => {
            "guests have no network interface; a sandbox's ports are reached through Airlock"
        }
        "HEALTHCHECK" => "use READY",
        "VOLUME" => "use a workspace (--workspace) for data that outlives a sandbox",
        "SHELL" => "write the shell in RUN's exec form, e.g. RUN [\"bash\", \"-c\", \"...\"]",
        "LABEL" | "MAINTAINER" | "STOPSIGNAL" | "ONBUILD" => "remove it",
        _ => "see docs/templates.md for the instructions a template file takes",
    };
    format!("{keyword} is not supported: {hint}")
}

#[cfg(test)]
mod tests;
