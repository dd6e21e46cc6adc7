//! Contexts: [`Language`], how to start one ([`ContextOptions`]) and what
//! the agent says about one ([`ContextInfo`]).

use std::collections::HashMap;
use std::path::PathBuf;

use airlock_proto::contract::code::{BASH, PYTHON};
use airlock_proto::v1::{ContextInfo as ProtoInfo, CreateContextRequest};

/// A language the agent runs cells in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Language {
    /// Python 3 (the guest's `python3`): the value of the last expression,
    /// rich outputs, tracebacks.
    #[default]
    Python,
    /// One bash process per context: the working directory, variables and
    /// functions persist; a non-zero status is an error.
    Bash,
}

impl Language {
    /// The protocol's name (`python`, `bash`).
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => PYTHON,
            Language::Bash => BASH,
        }
    }

    /// The language the agent named.
    pub(crate) fn from_name(name: &str) -> Option<Language> {
        match name {
            PYTHON => Some(Language::Python),
            BASH => Some(Language::Bash),
            _ => None,
        }
    }
}

impl std::fmt::Display for Language {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Language {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "python" | "python3" | "py" => Ok(Language::Python),
            "bash" | "sh" | "shell" => Ok(Language::Bash),
            other => Err(format!("unknown language {other:?}; use python or bash")),
        }
    }
}

/// How to start a context, built like a [`Command`](crate::Command).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContextOptions {
    pub(crate) language: Language,
    pub(crate) id: Option<String>,
    pub(crate) cwd: Option<PathBuf>,
    pub(crate) env: HashMap<String, String>,
    pub(crate) user: Option<String>,
}

impl ContextOptions {
    /// A context of `language`, named by the agent (`ctx-N`).
    pub fn new(language: Language) -> Self {
        ContextOptions {
            language,
            ..ContextOptions::default()
        }
    }

    /// Names the context (1 to 64 of `A-Za-z0-9._-`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The interpreter's working directory (default: the sandbox's default
    /// directory, a named template's `WORKDIR`; without one, the user's
    /// home, else `/`).
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds an environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Who runs the interpreter (`name`, `uid`, `name:group`, `uid:gid`;
    /// default: the sandbox's default user, a named template's `USER`).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    pub(crate) fn to_request(&self) -> CreateContextRequest {
        CreateContextRequest {
            language: self.language.as_str().to_owned(),
            id: self.id.clone().unwrap_or_default(),
            cwd: self
                .cwd
                .as_ref()
                .map(|cwd| cwd.to_string_lossy().into_owned())
                .unwrap_or_default(),
            env: self.env.clone(),
            user: self.user.clone().unwrap_or_default(),
        }
    }
}

/// A context as the agent describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextInfo {
    /// Its id.
    pub id: String,
    /// Its language.
    pub language: Language,
    /// The interpreter's version (`3.11.2`, `5.2.15(1)-release`).
    pub language_version: String,
    /// The interpreter's pid in the guest (0 while none runs).
    pub pid: u32,
    /// A cell is running.
    pub busy: bool,
    /// Cells run since the interpreter (re)started.
    pub execution_count: u32,
}

impl ContextInfo {
    pub(crate) fn from_proto(info: ProtoInfo) -> crate::Result<ContextInfo> {
        let language = Language::from_name(&info.language).ok_or_else(|| {
            crate::Error::Protocol(format!("a context of language {:?}", info.language))
        })?;
        Ok(ContextInfo {
            id: info.id,
            language,
            language_version: info.language_version,
            pid: info.pid,
            busy: info.busy,
            execution_count: info.execution_count,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn options_become_the_request() {
        let request = ContextOptions::new(Language::Bash)
            .id("build")
            .cwd("/src")
            .env("A", "1")
            .user("1000")
            .to_request();
        assert_eq!(request.language, "bash");
        assert_eq!(request.id, "build");
        assert_eq!(request.cwd, "/src");
        assert_eq!(request.env["A"], "1");
        assert_eq!(request.user, "1000");
        assert_eq!("sh".parse::<Language>().unwrap(), Language::Bash);
        assert!("ruby".parse::<Language>().is_err());
    }
}
