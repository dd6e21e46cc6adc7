//! `airlock image ls` and `airlock image rm`: the image store (see
//! `airlock::images`). Images are built by `airlock-rootfs image build`.

use airlock::images::{ImageInfo, ImageStore};

use super::{ImageCommand, EXIT_AIRLOCK_ERROR};

/// The image file for `--image NAME|PATH`, or a message that says what to
/// do instead.
pub fn locate(name: &str) -> Result<std::path::PathBuf, String> {
    ImageStore::open_default().locate(name).map_err(|error| {
        let cause = std::error::Error::source(&error)
            .map(|cause| format!(": {cause}"))
            .unwrap_or_default();
        format!("{error}{cause} (or pass --no-image for the busybox initramfs)")
    })
}

/// Runs an `image` subcommand and returns the exit code.
pub fn run(command: ImageCommand) -> u8 {
    let store = ImageStore::open_default();
    match command {
        ImageCommand::Ls => match store.list() {
            Ok(images) => {
                super::stdout::print(&table(&images, airlock::images::now_unix()));
                0
            }
            Err(error) => fail(&error),
        },
        ImageCommand::Rm { names } => {
            let mut code = 0;
            for name in names {
                match store.remove(&name) {
                    Ok(removed) => {
                        for name in &removed.names {
                            println!("untagged {name}");
                        }
                        if let Some(id) = &removed.deleted {
                            println!("deleted {id}");
                        }
                    }
                    Err(error) => code = fail(&error),
                }
            }
            code
        }
    }
}

/// The `image ls` table: one line per image, newest first.
fn table(images: &[ImageInfo], now: u64) -> String {
    let mut rows = vec![[
        "NAME".to_owned(),
        "ID".to_owned(),
        "SIZE".to_owned(),
        "CREATED".to_owned(),
        "SOURCE".to_owned(),
    ]];
    for image in images {
        let names = if image.names.is_empty() {
            "-".to_owned()
        } else {
            image.names.join(",")
        };
        rows.push([
            names,
            image.meta.id.clone(),
            format!("{:.0} MiB", image.disk_bytes as f64 / 1048576.0),
            age(now.saturating_sub(image.meta.created_unix)),
            image.meta.source.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..4)
        .map(|col| rows.iter().map(|r| r[col].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        for (col, width) in widths.iter().enumerate() {
            out.push_str(&format!("{:<width$}  ", row[col]));
        }
        out.push_str(&row[4]);
        out.push('\n');
    }
    out
}

fn age(seconds: u64) -> String {
    match seconds {
        0..=59 => format!("{seconds} s ago"),
        60..=3599 => format!("{} min ago", seconds / 60),
        3600..=86399 => format!("{} h ago", seconds / 3600),
        _ => format!("{} days ago", seconds / 86400),
    }
}

fn fail(error: &dyn std::error::Error) -> u8 {
    eprintln!("airlock: {}", airlock::error_chain(error));
    EXIT_AIRLOCK_ERROR
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock::images::ImageMeta;

    #[test]
    fn table_lists_names_ids_sizes_and_ages() {
        let image = ImageInfo {
            meta: ImageMeta {
                id: "0123456789abcdef".into(),
                source: "debian bookworm minbase +python3".into(),
                content_bytes: 1,
                image_bytes: 2,
                created_unix: 1000,
                build_seconds: 3.0,
            },
            names: vec!["default".into()],
            path: "/x/rootfs.ext4".into(),
            disk_bytes: 300 << 20,
        };
        let text = table(&[image], 1000 + 7200);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("NAME"), "{text}");
        assert!(
            lines[1].starts_with("default  0123456789abcdef  300 MiB  2 h ago"),
            "{text}"
        );
        assert!(
            lines[1].ends_with("debian bookworm minbase +python3"),
            "{text}"
        );
    }
}
