//! [`TemplateSpec`]: what a named template is made of, read from a file in
//! the Dockerfile subset (`parse`) or built in code.
//!
//! - `dockerfile`: the parser (logical lines, words and quotes, variable
//!   substitution, one function per instruction). Pure: no file or VM is
//!   touched, so it is unit-tested and fuzzed (`fuzz/fuzz_targets/template_file.rs`).
//! - `ready`: [`Ready`], the check a build waits for before the snapshot.
//!
//! ```
//! use airlock::template::{Ready, TemplateSpec};
//!
//! let spec = TemplateSpec::from_image("default")
//!     .run("echo hello > /srv/index.html")
//!     .workdir("/srv")
//!     .start("python3 -m http.server 8000")
//!     .ready(Ready::port(8000));
//! assert_eq!(spec.steps().len(), 2);
//! ```

mod dockerfile;
mod lines;
mod ready;
mod words;

use std::collections::BTreeMap;
use std::path::PathBuf;

pub use dockerfile::ParseError;
pub use ready::{Ready, ReadyCheck, DEFAULT_READY_TIMEOUT};

/// What the build starts from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Base {
    /// An image in the image store, by name or id (`airlock image ls`).
    Image(String),
    /// A Debian suite built by debootstrap (`FROM debian:bookworm`).
    Debian(String),
    /// An OCI layout directory, a `docker save` archive or a root tarball,
    /// relative to the context directory unless absolute.
    Path(PathBuf),
}

/// A program: the shell form (run by `/bin/sh -c`) or the exec form (argv).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Program {
    Shell(String),
    Exec(Vec<String>),
}

impl Program {
    /// The argv the guest runs.
    pub fn argv(&self) -> Vec<String> {
        match self {
            Program::Shell(line) => vec!["/bin/sh".into(), "-c".into(), line.clone()],
            Program::Exec(argv) => argv.clone(),
        }
    }

    /// For progress lines and cache keys.
    pub fn describe(&self) -> String {
        match self {
            Program::Shell(line) => line.clone(),
            Program::Exec(argv) => serde_json::to_string(argv).unwrap_or_default(),
        }
    }
}

/// `COPY` or `ADD` of local files from the context directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyStep {
    /// Paths relative to the context directory (files or directories).
    pub sources: Vec<String>,
    /// Where they go in the guest; relative to the working directory unless
    /// absolute. Ending in `/` (or several sources): a directory.
    pub dest: String,
    /// `--chown=USER[:GROUP]`.
    pub chown: Option<String>,
    /// `--chmod=OCTAL`.
    pub chmod: Option<u32>,
}

/// One instruction that changes the filesystem or the build's context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepKind {
    Run(Program),
    Copy(CopyStep),
    Env(Vec<(String, String)>),
    Workdir(String),
    User(String),
}

impl StepKind {
    /// The instruction as a line (progress and cache keys).
    pub fn describe(&self) -> String {
        match self {
            StepKind::Run(program) => format!("RUN {}", program.describe()),
            StepKind::Copy(copy) => format!("COPY {} {}", copy.sources.join(" "), copy.dest),
            StepKind::Env(pairs) => {
                let pairs: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("ENV {}", pairs.join(" "))
            }
            StepKind::Workdir(dir) => format!("WORKDIR {dir}"),
            StepKind::User(user) => format!("USER {user}"),
        }
    }

    /// Whether the step runs in a build VM (the others only change what
    /// later steps and the sandbox's processes see; `WORKDIR`'s directory
    /// is made by the next step that runs, and in the root image).
    pub fn needs_vm(&self) -> bool {
        matches!(self, StepKind::Run(_) | StepKind::Copy(_))
    }
}

/// A step and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    pub kind: StepKind,
    /// The line of the file it was read from (`None`: built in code).
    pub line: Option<usize>,
    /// `ARG` values in force (they reach `RUN` as environment variables).
    pub args: BTreeMap<String, String>,
}

/// A named template's recipe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateSpec {
    base: Base,
    steps: Vec<Step>,
    start: Option<Program>,
    ready: Option<Ready>,
    allow_net: Vec<String>,
}

impl TemplateSpec {
    /// A spec that starts from `base`.
    pub fn new(base: Base) -> Self {
        TemplateSpec {
            base,
            steps: Vec::new(),
            start: None,
            ready: None,
            allow_net: Vec::new(),
        }
    }

    /// A spec that starts from an image in the store.
    pub fn from_image(name: impl Into<String>) -> Self {
        Self::new(Base::Image(name.into()))
    }

    /// Reads the Dockerfile subset (see docs/templates.md); `build_args`
    /// override `ARG` defaults. Errors name the line.
    pub fn parse(text: &str, build_args: &BTreeMap<String, String>) -> Result<Self, ParseError> {
        dockerfile::parse(text, build_args)
    }

    fn push(mut self, kind: StepKind) -> Self {
        self.steps.push(Step {
            kind,
            line: None,
            args: BTreeMap::new(),
        });
        self
    }

    /// `RUN` in the shell form.
    pub fn run(self, line: impl Into<String>) -> Self {
        self.push(StepKind::Run(Program::Shell(line.into())))
    }

    /// `RUN` in the exec form.
    pub fn run_argv<I, S>(self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.push(StepKind::Run(Program::Exec(
            argv.into_iter().map(Into::into).collect(),
        )))
    }

    /// `COPY source dest` (source relative to the context directory).
    pub fn copy(self, source: impl Into<String>, dest: impl Into<String>) -> Self {
        self.push(StepKind::Copy(CopyStep {
            sources: vec![source.into()],
            dest: dest.into(),
            chown: None,
            chmod: None,
        }))
    }

    pub fn env(self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.push(StepKind::Env(vec![(key.into(), value.into())]))
    }

    pub fn workdir(self, dir: impl Into<String>) -> Self {
        self.push(StepKind::Workdir(dir.into()))
    }

    pub fn user(self, user: impl Into<String>) -> Self {
        self.push(StepKind::User(user.into()))
    }

    /// The program started in the background before the snapshot.
    pub fn start(mut self, line: impl Into<String>) -> Self {
        self.start = Some(Program::Shell(line.into()));
        self
    }

    /// The check the build waits for after `START`.
    pub fn ready(mut self, ready: Ready) -> Self {
        self.ready = Some(ready);
        self
    }

    /// A network rule for `RUN` steps (as `--allow-net` takes it).
    pub fn allow_net(mut self, rule: impl Into<String>) -> Self {
        self.allow_net.push(rule.into());
        self
    }

    pub fn base(&self) -> &Base {
        &self.base
    }

    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    pub fn start_program(&self) -> Option<&Program> {
        self.start.as_ref()
    }

    pub fn ready_check(&self) -> Option<&Ready> {
        self.ready.as_ref()
    }

    pub fn network_rules(&self) -> &[String] {
        &self.allow_net
    }

    /// The environment, working directory and user after every step: what
    /// `START` and the sandbox's processes get.
    pub fn final_context(&self) -> StepContext {
        let mut context = StepContext::default();
        for step in &self.steps {
            context.apply(&step.kind);
        }
        context
    }
}

/// What `ENV`, `WORKDIR` and `USER` have set at some point of the build.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepContext {
    pub env: Vec<(String, String)>,
    /// `None`: `/`.
    pub workdir: Option<String>,
    /// `None`: root.
    pub user: Option<String>,
}

impl StepContext {
    /// The context after `kind`.
    pub fn apply(&mut self, kind: &StepKind) {
        match kind {
            StepKind::Env(pairs) => {
                for (key, value) in pairs {
                    self.env.retain(|(k, _)| k != key);
                    self.env.push((key.clone(), value.clone()));
                }
            }
            StepKind::Workdir(dir) => self.workdir = Some(self.resolve(dir)),
            StepKind::User(user) => self.user = Some(user.clone()),
            StepKind::Run(_) | StepKind::Copy(_) => {}
        }
    }

    /// `path` made absolute against the working directory.
    pub fn resolve(&self, path: &str) -> String {
        if path.starts_with('/') {
            return path.to_owned();
        }
        let base = self.workdir.as_deref().unwrap_or("/");
        format!("{}/{path}", base.trim_end_matches('/'))
    }
}
