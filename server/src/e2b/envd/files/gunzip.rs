//! A gzip-encoded upload (`Content-Encoding: gzip`, what the SDKs send
//! with `gzip=True`) decoded as it streams: the body's chunks go through
//! the decoder a little at a time, so a small body that inflates to a lot
//! is never held whole (each piece in yields at most about a MiB out).

use bytes::Bytes;
use flate2::write::GzDecoder;
use futures::{Stream, StreamExt};
use std::io::Write;

/// Compressed bytes fed to the decoder at once.
const PIECE: usize = 4 * 1024;

/// `body` decoded; a corrupt or cut stream fails with why.
pub fn gunzip<S>(body: S) -> impl Stream<Item = Result<Bytes, String>> + Send + Unpin
where
    S: Stream<Item = Result<Bytes, String>> + Send + Unpin + 'static,
{
    let state = State {
        body: Some(body),
        decoder: Some(GzDecoder::new(Vec::new())),
        pending: Bytes::new(),
    };
    Box::pin(futures::stream::unfold(state, |mut state| async move {
        loop {
            let decoder = state.decoder.as_mut()?;
            if !state.pending.is_empty() {
                let take = state.pending.len().min(PIECE);
                let piece = state.pending.split_to(take);
                if let Err(error) = decoder.write_all(&piece) {
                    state.decoder = None;
                    return Some((Err(format!("not gzip: {error}")), state));
                }
                let out = std::mem::take(decoder.get_mut());
                if !out.is_empty() {
                    return Some((Ok(Bytes::from(out)), state));
                }
                continue;
            }
            let next = match state.body.as_mut() {
                Some(body) => body.next().await,
                None => None,
            };
            match next {
                Some(Ok(chunk)) => state.pending = chunk,
                Some(Err(error)) => {
                    state.decoder = None;
                    return Some((Err(error), state));
                }
                None => {
                    state.body = None;
                    let mut decoder = state.decoder.take()?;
                    return match decoder.try_finish() {
                        Ok(()) => {
                            let out = std::mem::take(decoder.get_mut());
                            (!out.is_empty()).then(|| (Ok(Bytes::from(out)), state))
                        }
                        Err(error) => Some((Err(format!("a cut gzip stream: {error}")), state)),
                    };
                }
            }
        }
    }))
}

struct State<S> {
    body: Option<S>,
    decoder: Option<GzDecoder<Vec<u8>>>,
    pending: Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use flate2::Compression;

    fn gz(data: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(data).unwrap();
        encoder.finish().unwrap()
    }

    async fn decode(chunks: Vec<Vec<u8>>) -> Result<Vec<u8>, String> {
        let body = futures::stream::iter(chunks.into_iter().map(|c| Ok(Bytes::from(c))));
        let mut out = Vec::new();
        let mut stream = gunzip(body);
        while let Some(piece) = stream.next().await {
            out.extend_from_slice(&piece?);
        }
        Ok(out)
    }

    #[tokio::test]
    async fn decodes_across_chunks_and_refuses_garbage() {
        let data: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
        let packed = gz(&data);
        let chunks = packed.chunks(1000).map(<[u8]>::to_vec).collect();
        assert_eq!(decode(chunks).await.unwrap(), data);
        assert!(decode(vec![b"not gzip at all".to_vec()]).await.is_err());
        let cut = packed[..packed.len() / 2].to_vec();
        assert!(decode(vec![cut]).await.is_err());
    }
}
