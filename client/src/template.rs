//! Building a template through `Templates.Build`: the request stream (the
//! header, the context's tar bytes in chunks of at most
//! [`MAX_CHUNK_BYTES`], then `end`) and the build's events.
//!
//! The context is any stream of tar bytes; `airlock::fs::host_tar::pack`
//! makes one of a host directory. A context stream that fails should end
//! without its `end` (see [`build_requests`]): the server then refuses the
//! build as cut short rather than building what arrived.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tonic::Streaming;

use airlock_api::limits::MAX_CHUNK_BYTES;
use airlock_api::v1::{
    build_template_request::Part, BuildTemplateEnd, BuildTemplateEvent, BuildTemplateHeader,
    BuildTemplateRequest,
};

use crate::client::Client;
use crate::error::ClientError;

/// The requests of one build: `header`, `context`'s bytes in chunks the
/// server takes, then `end`, unless `context` yields `None` for an item
/// (its failure): then the stream ends there, without `end`.
pub fn build_requests<S>(
    header: BuildTemplateHeader,
    context: S,
) -> impl Stream<Item = BuildTemplateRequest> + Send + 'static
where
    S: Stream<Item = Option<Bytes>> + Send + 'static,
{
    let request = |part| BuildTemplateRequest { part: Some(part) };
    let first = futures::stream::iter([request(Part::Header(header))]);
    let rest = futures::stream::unfold(
        (Box::pin(context), false),
        move |(mut context, ended)| async move {
            if ended {
                return None;
            }
            match context.next().await {
                Some(Some(mut chunk)) => {
                    let mut pieces = Vec::new();
                    while chunk.len() > MAX_CHUNK_BYTES {
                        pieces.push(request(Part::Context(chunk.split_to(MAX_CHUNK_BYTES))));
                    }
                    if !chunk.is_empty() {
                        pieces.push(request(Part::Context(chunk)));
                    }
                    Some((pieces, (context, false)))
                }
                // The context failed: no `end`, so the server refuses the
                // build as cut short.
                Some(None) => None,
                None => Some((
                    vec![request(Part::End(BuildTemplateEnd {}))],
                    (context, true),
                )),
            }
        },
    )
    .flat_map(futures::stream::iter);
    first.chain(rest)
}

impl Client {
    /// Builds a template: sends `header` and `context` (tar bytes; `None`
    /// stops the upload without `end`, for a context that could not be
    /// read) and returns the build's events once the server accepted the
    /// header and the context. The last event is `done`; a failed build's
    /// stream ends with its status.
    pub async fn build_template<S>(
        &self,
        header: BuildTemplateHeader,
        context: S,
    ) -> Result<Streaming<BuildTemplateEvent>, ClientError>
    where
        S: Stream<Item = Option<Bytes>> + Send + 'static,
    {
        Ok(self
            .templates()
            .build(build_requests(header, context))
            .await?
            .into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(requests: Vec<BuildTemplateRequest>) -> Vec<&'static str> {
        requests
            .into_iter()
            .map(|r| match r.part {
                Some(Part::Header(_)) => "header",
                Some(Part::Context(_)) => "context",
                Some(Part::End(_)) => "end",
                None => "none",
            })
            .collect()
    }

    #[tokio::test]
    async fn a_context_goes_in_bounded_chunks_and_ends_with_end() {
        let big = Bytes::from(vec![0u8; MAX_CHUNK_BYTES * 2 + 1]);
        let context = futures::stream::iter([Some(big), Some(Bytes::from_static(b"x"))]);
        let sent: Vec<_> = build_requests(BuildTemplateHeader::default(), context)
            .collect()
            .await;
        assert_eq!(
            parts(sent),
            ["header", "context", "context", "context", "context", "end"]
        );
    }

    #[tokio::test]
    async fn a_failed_context_is_not_ended() {
        let context = futures::stream::iter([Some(Bytes::from_static(b"x")), None]);
        let sent: Vec<_> = build_requests(BuildTemplateHeader::default(), context)
            .collect()
            .await;
        assert_eq!(parts(sent), ["header", "context"]);
    }
}
