//! A loopback HTTPS server whose certificate comes from a throwaway CA,
//! serving what the trust tests fetch: a page (`/hello`) and a Python
//! package index in the simple format (PEP 503) with one wheel,
//! `airlock-probe` 1.0, so that `pip download` has something real to get.
//! Every request's line is recorded: a client that refused the certificate
//! never sends one.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use airlock::CaCert;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// The distribution the index serves.
pub const PACKAGE: &str = "airlock-probe";
/// Its one wheel's file name.
pub const WHEEL: &str = "airlock_probe-1.0-py3-none-any.whl";
/// What `/hello` answers.
pub const HELLO: &str = "hello over TLS from the test server";

/// The running server.
#[derive(Debug)]
pub struct TlsIndex {
    /// Where it listens (127.0.0.1).
    pub addr: SocketAddr,
    /// The name its certificate is for.
    pub name: String,
    /// The CA that issued its certificate.
    pub ca: CaCert,
    /// The CA as PEM.
    pub ca_pem: String,
    requests: Arc<Mutex<Vec<String>>>,
}

impl TlsIndex {
    /// Starts a server for `name` on 127.0.0.1, with a CA made now.
    pub async fn start(name: &str) -> TlsIndex {
        let issued = airlock_testkit::tls::issue("Airlock throwaway test CA", &[name]);
        let ca = match CaCert::from_pem(&issued.ca_pem) {
            Ok(mut certs) => certs.remove(0),
            Err(error) => panic!("the test CA is refused: {error}"),
        };
        let acceptor = issued.acceptor();
        let ca_pem = issued.ca_pem;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("local addr: {e}"));
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let wheel: Arc<[u8]> = wheel().into();
        let recorder = Arc::clone(&requests);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (acceptor, recorder, wheel) =
                    (acceptor.clone(), Arc::clone(&recorder), Arc::clone(&wheel));
                tokio::spawn(async move {
                    if let Ok(tls) = acceptor.accept(stream).await {
                        serve(tls, recorder, wheel).await;
                    }
                });
            }
        });
        TlsIndex {
            addr,
            name: name.to_owned(),
            ca,
            ca_pem,
            requests,
        }
    }

    /// `https://NAME:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}:{}{path}", self.name, self.addr.port())
    }

    /// The request lines received so far.
    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Answers requests on one connection (keep-alive) until it closes.
async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    requests: Arc<Mutex<Vec<String>>>,
    wheel: Arc<[u8]>,
) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        buf.drain(..end);
        let line = head.lines().next().unwrap_or_default().to_owned();
        if let Ok(mut requests) = requests.lock() {
            requests.push(line.clone());
        }
        let path = line.split_whitespace().nth(1).unwrap_or("/");
        let (status, kind, body) = answer(path, &wheel);
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        if stream.write_all(head.as_bytes()).await.is_err()
            || stream.write_all(&body).await.is_err()
        {
            return;
        }
    }
}

/// The status, content type and body for `path`.
fn answer(path: &str, wheel: &[u8]) -> (&'static str, &'static str, Vec<u8>) {
    let path = path.split('?').next().unwrap_or(path);
    if path == "/hello" {
        return ("200 OK", "text/plain", HELLO.as_bytes().to_vec());
    }
    if path == "/simple/" {
        let page = format!(
            "<!DOCTYPE html><html><body><a href=\"/simple/{PACKAGE}/\">{PACKAGE}</a></body></html>"
        );
        return ("200 OK", "text/html", page.into_bytes());
    }
    if path == format!("/simple/{PACKAGE}/") {
        let digest = crate::sha256_hex(wheel);
        let page = format!(
            "<!DOCTYPE html><html><body>\
             <a href=\"/files/{WHEEL}#sha256={digest}\">{WHEEL}</a>\
             </body></html>"
        );
        return ("200 OK", "text/html", page.into_bytes());
    }
    if path == format!("/files/{WHEEL}") {
        return ("200 OK", "application/octet-stream", wheel.to_vec());
    }
    ("404 Not Found", "text/plain", b"not here".to_vec())
}

/// The wheel: a module and its metadata, in a zip archive (stored).
fn wheel() -> Vec<u8> {
    let files: [(&str, &[u8]); 3] = [
        ("airlock_probe/__init__.py", b"VALUE = 42\n"),
        (
            "airlock_probe-1.0.dist-info/METADATA",
            b"Metadata-Version: 2.1\nName: airlock-probe\nVersion: 1.0\n",
        ),
        (
            "airlock_probe-1.0.dist-info/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: airlock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        ),
    ];
    let mut record = String::new();
    for (name, data) in files {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(data);
        record.push_str(&format!(
            "{name},sha256={},{}\n",
            base64_url(&digest),
            data.len()
        ));
    }
    record.push_str("airlock_probe-1.0.dist-info/RECORD,,\n");
    let mut all: Vec<(&str, &[u8])> = files.to_vec();
    all.push(("airlock_probe-1.0.dist-info/RECORD", record.as_bytes()));
    zip_stored(&all)
}

/// Base64 for URLs, without padding, as wheel RECORDs write digests.
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// A zip archive of `files`, each stored (not compressed).
fn zip_stored(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut central = Vec::new();
    for (name, data) in files {
        let offset = out.len() as u32;
        let crc = crc32(data);
        let size = data.len() as u32;
        let name_len = name.len() as u16;
        // Local file header: version 2.0, no flags, stored, no time.
        out.extend_from_slice(&0x0403_4b50u32.to_le_bytes());
        for v in [20u16, 0, 0, 0, 0x21] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [crc, size, size] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&name_len.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(data);
        // Its central directory entry.
        central.extend_from_slice(&0x0201_4b50u32.to_le_bytes());
        for v in [20u16, 20, 0, 0, 0, 0x21] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        for v in [crc, size, size] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        for v in [name_len, 0, 0, 0, 0] {
            central.extend_from_slice(&v.to_le_bytes());
        }
        central.extend_from_slice(&0u32.to_le_bytes());
        central.extend_from_slice(&offset.to_le_bytes());
        central.extend_from_slice(name.as_bytes());
    }
    let central_offset = out.len() as u32;
    let count = files.len() as u16;
    out.extend_from_slice(&central);
    out.extend_from_slice(&0x0605_4b50u32.to_le_bytes());
    for v in [0u16, 0, count, count] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out.extend_from_slice(&(central.len() as u32).to_le_bytes());
    out.extend_from_slice(&central_offset.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out
}

/// CRC-32 (IEEE), as zip wants it.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = 0xffff_ffffu32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xedb8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32_and_base64_match_known_values() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926);
        assert_eq!(base64_url(b"\xfb\xff"), "-_8");
        assert_eq!(base64_url(b"abc"), "YWJj");
    }

    #[test]
    fn the_wheel_is_a_zip_python_reads() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(WHEEL);
        std::fs::write(&path, wheel()).unwrap_or_else(|e| panic!("{e}"));
        // The host's python3 (scripts/setup installs it) checks the archive.
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
                 assert z.testzip() is None; \
                 print(z.read('airlock_probe/__init__.py').decode(), end='')",
            ])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("python3: {e}"));
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"VALUE = 42\n");
    }
}
