//! `airlock template build|ls|rm` against a server (`--host` or
//! `AIRLOCK_HOST`, with `AIRLOCK_API_KEY`): the build's context directory
//! packed as a tar stream and sent with the file through
//! `Templates.Build`, its events printed as a local build prints them; the
//! templates listed and deleted through the API (`template` prints the
//! list).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use futures::StreamExt;

use airlock::template::build::OutputStream;
use airlock::template::BuildEvent;
use airlock_client::api::{self, build_template_event::Event};

use super::remote::{message, ServerOptions};
use super::template_build::{print_event, BuildArgs, Source};

/// Builds on the server; prints as a local build does.
pub async fn build(server: &ServerOptions, args: &BuildArgs) -> Result<(), String> {
    let source = Source::read(args)?;
    let client = server.connect().await?;
    let header = api::BuildTemplateHeader {
        name: source.name.clone(),
        file: source.text.clone(),
        build_args: args.build_args.iter().cloned().collect::<HashMap<_, _>>(),
        allow_net: args.allow_net.iter().map(ToString::to_string).collect(),
        memory_mib: args.memory,
        vcpus: args.vcpus,
        timeout_secs: args.timeout.unwrap_or(0),
        context_bytes: tar_bytes_at_least(&source.context),
    };
    let failed = Arc::new(Mutex::new(None::<String>));
    let context = {
        let failed = Arc::clone(&failed);
        airlock::fs::host_tar::pack(source.context.clone()).map(move |chunk| match chunk {
            Ok(chunk) => Some(chunk),
            Err(error) => {
                *failed.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(airlock::error_chain(&error));
                None
            }
        })
    };
    let began = Instant::now();
    let sent = client.build_template(header, context).await;
    let local = || {
        failed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
            .map(|error| format!("context directory {}: {error}", source.context.display()))
    };
    let mut events = match sent {
        Ok(events) => events,
        Err(error) => return Err(local().unwrap_or_else(|| message(error))),
    };
    let mut steps = 0;
    let built = loop {
        match events.message().await {
            Ok(Some(event)) => match event.event {
                Some(Event::Done(info)) => break info,
                Some(event) => {
                    if let Event::Step(step) = &event {
                        steps = step.steps;
                    }
                    if let Some(event) = local_event(event) {
                        print_event(event);
                    }
                }
                None => {}
            },
            Ok(None) => return Err("the server ended the build without its result".into()),
            Err(status) => return Err(local().unwrap_or_else(|| message(status.into()))),
        }
    };
    println!(
        "built template {} on {} in {:.1}s ({steps} steps, {} MiB on disk)",
        built.name,
        client.endpoint(),
        began.elapsed().as_secs_f64(),
        built.size_bytes >> 20,
    );
    println!(
        "start it: airlock sandbox create --template {}   (with the same AIRLOCK_HOST and key)",
        built.name
    );
    Ok(())
}

/// An event of the API as the library's, for the printer local builds
/// use (the API does not carry a step's line).
fn local_event(event: Event) -> Option<BuildEvent> {
    let number = |n: u32| usize::try_from(n).unwrap_or(usize::MAX);
    Some(match event {
        Event::Step(step) => BuildEvent::Step {
            number: number(step.number),
            total: number(step.steps),
            line: None,
            instruction: step.instruction,
            cached: step.cached,
        },
        Event::Log(log) => BuildEvent::Output {
            number: number(log.step),
            stream: if log.stderr {
                OutputStream::Stderr
            } else {
                OutputStream::Stdout
            },
            data: log.data,
        },
        Event::Phase(phase) => BuildEvent::Phase(phase.phase),
        Event::Done(_) => return None,
    })
}

/// The least a tar stream of `dir` takes: a header and whole blocks for
/// each entry, and the two blocks at its end (long names and links take
/// more). The server refuses a context past its bound before it is sent.
fn tar_bytes_at_least(dir: &Path) -> u64 {
    fn walk(dir: &Path) -> u64 {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .map(|entry| {
                let Ok(meta) = entry.path().symlink_metadata() else {
                    return 0;
                };
                512 + if meta.is_dir() {
                    walk(&entry.path())
                } else if meta.is_file() {
                    meta.len().div_ceil(512) * 512
                } else {
                    0
                }
            })
            .sum()
    }
    walk(dir) + 1024
}

/// The server's templates and the caller's, and where they are.
pub async fn list(server: &ServerOptions) -> Result<(String, Vec<api::TemplateInfo>), String> {
    let client = server.connect().await?;
    let templates = client
        .sandboxes()
        .list_templates(api::ListTemplatesRequest {})
        .await
        .map_err(|status| message(status.into()))?
        .into_inner()
        .templates;
    Ok((client.endpoint().to_owned(), templates))
}

/// Deletes templates by name; `Ok(false)` when any could not be.
pub async fn remove(server: &ServerOptions, names: &[String]) -> Result<bool, String> {
    let client = server.connect().await?;
    let mut all = true;
    for name in names {
        let deleted = client
            .templates()
            .delete_template(api::DeleteTemplateRequest { name: name.clone() })
            .await;
        match deleted {
            Ok(_) => println!("removed template {name}"),
            Err(status) => {
                eprintln!("airlock: {}", message(status.into()));
                all = false;
            }
        }
    }
    Ok(all)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_tar_is_at_least_its_headers_and_blocks() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/a"), [0u8; 513]).unwrap();
        // sub (512) + a (512 + 1024) + the end (1024).
        assert_eq!(tar_bytes_at_least(dir.path()), 512 + 512 + 1024 + 1024);
        let mut packed = Vec::new();
        let mut builder = tar::Builder::new(&mut packed);
        builder.append_dir_all(".", dir.path()).unwrap();
        builder.finish().unwrap();
        drop(builder);
        assert!(packed.len() as u64 >= tar_bytes_at_least(dir.path()));
    }

    #[test]
    fn events_print_as_a_local_builds() {
        let step = Event::Step(api::BuildStep {
            number: 2,
            steps: 3,
            instruction: "RUN true".into(),
            cached: true,
        });
        assert!(matches!(
            local_event(step),
            Some(BuildEvent::Step {
                number: 2,
                total: 3,
                cached: true,
                line: None,
                ..
            })
        ));
        let log = Event::Log(api::BuildLog {
            step: 2,
            data: "hi\n".into(),
            stderr: true,
        });
        assert!(matches!(
            local_event(log),
            Some(BuildEvent::Output {
                number: 2,
                stream: OutputStream::Stderr,
                ..
            })
        ));
    }
}
