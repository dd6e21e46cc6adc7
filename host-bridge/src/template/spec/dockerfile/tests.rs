use super::*;

fn parse_ok(text: &str) -> TemplateSpec {
    parse(text, &BTreeMap::new()).unwrap_or_else(|e| panic!("{e}"))
}

fn parse_err(text: &str) -> ParseError {
    match parse(text, &BTreeMap::new()) {
        Ok(spec) => panic!("accepted: {spec:?}"),
        Err(e) => e,
    }
}

fn kinds(spec: &TemplateSpec) -> Vec<StepKind> {
    spec.steps().iter().map(|s| s.kind.clone()).collect()
}

#[test]
fn a_whole_file() {
    let spec = parse_ok(
        "# syntax: ignored\n\
         ARG VERSION=1\n\
         FROM default\n\
         ENV APP=/srv/app PORT=8000\n\
         COPY --chmod=0644 hello.deb /tmp/\n\
         RUN dpkg -i /tmp/hello.deb && \\\n  rm /tmp/hello.deb\n\
         RUN [\"python3\", \"-c\", \"print(1)\"]\n\
         WORKDIR $APP\n\
         ADD project/ .\n\
         USER nobody\n\
         START python3 -m http.server $PORT\n\
         READY --timeout=30s port 8000\n",
    );
    assert_eq!(spec.base(), &Base::Image("default".into()));
    assert_eq!(
        kinds(&spec),
        vec![
            StepKind::Env(vec![
                ("APP".into(), "/srv/app".into()),
                ("PORT".into(), "8000".into())
            ]),
            StepKind::Copy(CopyStep {
                sources: vec!["hello.deb".into()],
                dest: "/tmp/".into(),
                chown: None,
                chmod: Some(0o644),
            }),
            StepKind::Run(Program::Shell(
                "dpkg -i /tmp/hello.deb && rm /tmp/hello.deb".into()
            )),
            StepKind::Run(Program::Exec(vec![
                "python3".into(),
                "-c".into(),
                "print(1)".into()
            ])),
            StepKind::Workdir("/srv/app".into()),
            StepKind::Copy(CopyStep {
                sources: vec!["project/".into()],
                dest: ".".into(),
                chown: None,
                chmod: None,
            }),
            StepKind::User("nobody".into()),
        ]
    );
    let lines: Vec<_> = spec.steps().iter().map(|s| s.line).collect();
    assert_eq!(
        lines,
        [4, 5, 6, 8, 9, 10, 11].map(Some).to_vec(),
        "a step's line is where it begins"
    );
    // START is shell form, untouched: the shell expands $PORT from ENV.
    assert_eq!(
        spec.start_program(),
        Some(&Program::Shell("python3 -m http.server $PORT".into()))
    );
    assert_eq!(
        spec.ready_check(),
        Some(&Ready::port(8000).timeout(Duration::from_secs(30)))
    );
    assert_eq!(
        spec.steps()[2].args.get("VERSION").map(String::as_str),
        Some("1")
    );
    let context = spec.final_context();
    assert_eq!(context.workdir.as_deref(), Some("/srv/app"));
    assert_eq!(context.user.as_deref(), Some("nobody"));
}

#[test]
fn build_args_override_defaults_and_reach_from() {
    let args = [("IMG".to_owned(), "other".to_owned())].into();
    let spec = parse("ARG IMG=default\nFROM $IMG\nRUN true\n", &args).unwrap();
    assert_eq!(spec.base(), &Base::Image("other".into()));
    let spec = parse_ok("ARG IMG=default\nFROM ${IMG}\n");
    assert_eq!(spec.base(), &Base::Image("default".into()));
}

#[test]
fn bases() {
    assert_eq!(
        parse_ok("FROM debian:bookworm").base(),
        &Base::Debian("bookworm".into())
    );
    assert_eq!(
        parse_ok("FROM ./layout").base(),
        &Base::Path(PathBuf::from("./layout"))
    );
    assert_eq!(
        parse_ok("from /srv/image.tar").base(),
        &Base::Path(PathBuf::from("/srv/image.tar"))
    );
    for registry in [
        "python:3.12-slim",
        "ghcr.io/org/image:1",
        "library/ubuntu",
        "debian:sid",
    ] {
        let error = parse_err(&format!("FROM {registry}\n"));
        assert_eq!(error.line, 1);
        assert!(error.message.contains("pulls from no registry"), "{error}");
        assert!(error.message.contains("airlock image ls"), "{error}");
    }
}

#[test]
fn ready_checks() {
    let check = |line: &str| {
        parse_ok(&format!("FROM default\nSTART sleep 100\n{line}\n"))
            .ready_check()
            .cloned()
            .unwrap()
    };
    assert_eq!(check("READY port 8888"), Ready::port(8888));
    assert_eq!(check("READY file /tmp/ready"), Ready::file("/tmp/ready"));
    assert_eq!(
        check("READY cmd test -S /run/x.sock"),
        Ready::cmd("test -S /run/x.sock")
    );
    assert_eq!(
        check("READY --timeout=2m url http://127.0.0.1:8888/api"),
        Ready::url("http://127.0.0.1:8888/api").timeout(Duration::from_secs(120))
    );
    assert_eq!(
        check("READY --timeout=500ms file /x").timeout,
        Duration::from_millis(500)
    );
    for bad in [
        "READY port 0",
        "READY port http",
        "READY sock /x",
        "READY port",
        "READY --timeout=soon port 1",
        "READY --retries=3 port 1",
        "READY url ftp://x/",
    ] {
        let error = parse_err(&format!("FROM default\nSTART sleep 100\n{bad}\n"));
        assert_eq!(error.line, 3, "{bad}: {error}");
    }
    assert_eq!(parse_err("FROM default\nREADY port 1\n").line, 0);
}

#[test]
fn unknown_and_unsupported_instructions_name_their_line() {
    for (file, line, words) in [
        (
            "FROM default\nRUN true\nFROBNICATE x\n",
            3,
            "FROBNICATE is not supported",
        ),
        ("FROM default\nCMD [\"x\"]\n", 2, "use START"),
        ("FROM default\n\nEXPOSE 80\n", 3, "EXPOSE"),
        ("FROM default\nFROM other\n", 2, "multi-stage"),
        ("FROM default AS build\n", 1, "multi-stage"),
        ("FROM default\nCOPY --from=build /a /b\n", 2, "multi-stage"),
        (
            "FROM default\nADD https://example.invalid/x /x\n",
            2,
            "no downloads",
        ),
        ("FROM default\nADD app.tar.gz /srv\n", 2, "not unpacked"),
        ("FROM default\nCOPY *.py /srv/\n", 2, "wildcards"),
        (
            "FROM default\nCOPY ../secret /srv/\n",
            2,
            "outside the context",
        ),
        (
            "FROM default\nCOPY onlyone\n",
            2,
            "a source and a destination",
        ),
        ("RUN true\n", 1, "before FROM"),
        ("FROM default\nENV =x\n", 2, "ENV"),
        ("FROM default\nENV A \"b\n", 2, "unterminated"),
        ("FROM default\nRUN\n", 2, "needs arguments"),
        (
            "FROM default\nRUN --mount=type=cache x\n",
            2,
            "not supported",
        ),
        ("FROM default\nSTART a\nSTART b\n", 3, "a second START"),
        ("FROM default\nWORKDIR a b\n", 2, "one value"),
        ("", 0, "no FROM"),
    ] {
        let error = parse_err(file);
        assert_eq!(error.line, line, "{file:?}: {error}");
        assert!(error.message.contains(words), "{file:?}: {error}");
    }
}

#[test]
fn env_forms_and_substitution_order() {
    let spec = parse_ok("FROM default\nENV A 1 2\nENV B=${A}x C=\"$B\"\n");
    assert_eq!(
        kinds(&spec),
        vec![
            StepKind::Env(vec![("A".into(), "1 2".into())]),
            // Within one ENV, values are those before it (as Docker).
            StepKind::Env(vec![("B".into(), "1 2x".into()), ("C".into(), "".into())]),
        ]
    );
    let context = spec.final_context();
    assert_eq!(context.env.len(), 3);
}

#[test]
fn exec_form_that_is_not_json_is_shell_form() {
    let spec = parse_ok("FROM default\nRUN [ -e /x ] || true\n");
    assert_eq!(
        kinds(&spec),
        vec![StepKind::Run(Program::Shell("[ -e /x ] || true".into()))]
    );
    assert_eq!(parse_err("FROM default\nRUN []\n").line, 2);
}
