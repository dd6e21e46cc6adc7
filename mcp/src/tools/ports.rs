//! `expose_port`: where a server a program started in a sandbox is reached
//! from outside it, through the server's HTTP ingress (`Ingress.GetHost`).

use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::service::RequestContext;
use rmcp::{schemars, tool, tool_router, RoleServer};
use serde::Deserialize;
use serde_json::json;

use airlock_client::api::{GetHostRequest, GetHostResponse};

use super::AirlockTools;
use crate::outcome::{finish, Reply, Stop};

/// The header a request carries the sandbox's traffic token in.
const TOKEN_HEADER: &str = "X-Airlock-Token";

#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(transform = super::schema::one_line)]
pub struct ExposePort {
    /// The port the server listens on in the sandbox (1 to 65535), on
    /// 127.0.0.1 or on every address.
    pub port: u32,
    /// The sandbox. Default: this session's own sandbox.
    pub sandbox_id: Option<String>,
}

#[tool_router(router = ports_router, vis = "pub(super)")]
impl AirlockTools {
    #[tool(
        description = "The URL of a server a program listens on in a sandbox (a web app, a dev \
        server, a notebook, an API under test), for the user to open in a browser or for a \
        client on the host. Start the server first with run_command and background true; \
        requests before it listens are answered 502. The URL carries the sandbox's traffic \
        token: without it a request is refused (401).",
        annotations(
            title = "Expose a port",
            read_only_hint = true,
            open_world_hint = false
        )
    )]
    async fn expose_port(
        &self,
        Parameters(params): Parameters<ExposePort>,
        context: RequestContext<RoleServer>,
    ) -> Reply {
        let _busy = self.session.busy(&context);
        finish(self.do_expose_port(params, context).await)
    }
}

impl AirlockTools {
    async fn do_expose_port(
        &self,
        params: ExposePort,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResult, Stop> {
        if !(1..=u32::from(u16::MAX)).contains(&params.port) {
            return Err(Stop::Invalid(format!(
                "port must be 1 to 65535, not {}",
                params.port
            )));
        }
        let target = self.session.target(&context, params.sandbox_id).await?;
        let found = match target
            .client
            .ingress()
            .get_host(GetHostRequest {
                sandbox_id: target.id.clone(),
                port: params.port,
            })
            .await
        {
            Ok(found) => found.into_inner(),
            Err(status) => {
                return Err(self
                    .session
                    .failed(&target, "cannot expose the port", status.into())
                    .await)
            }
        };
        let mut result = CallToolResult::success(vec![ContentBlock::text(exposed_text(
            &target.id,
            params.port,
            &found,
        ))]);
        result.structured_content = Some(json!({
            "sandbox_id": target.id,
            "port": params.port,
            "url": found.url,
            "host": found.host,
            "address": found.address,
            "path_url": found.path_url,
            "token": found.token,
            "public": found.public,
        }));
        Ok(result)
    }
}

/// What the model reads: the URL to hand the user, and the forms a client
/// on the host that cannot resolve the name can use.
fn exposed_text(id: &str, port: u32, found: &GetHostResponse) -> String {
    let mut text = format!("Port {port} of sandbox {id}:\n");
    if found.public {
        text.push_str(&format!(
            "URL: {} (a public port: no token needed)\n",
            found.url
        ));
        text.push_str(&format!(
            "From a client on the host that cannot resolve that name (curl, Python): {} or \
             http://{}/ with the header Host: {}\n",
            found.path_url, found.address, found.host
        ));
    } else {
        text.push_str(&format!(
            "URL to open in a browser: {} (the token in it sets a cookie, then the browser is \
             sent to the same URL without it)\n",
            found.url
        ));
        text.push_str(&format!(
            "From a client on the host: send the header {TOKEN_HEADER}: {} to {} (or to \
             http://{}/ with the header Host: {})\n",
            found.token, found.path_url, found.address, found.host
        ));
    }
    text.push_str("A request before the server listens is answered 502.\n");
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(public: bool) -> GetHostResponse {
        GetHostResponse {
            host: "8000-sb1.airlock.localhost:7480".into(),
            url: if public {
                "http://8000-sb1.airlock.localhost:7480/".into()
            } else {
                "http://8000-sb1.airlock.localhost:7480/?airlock_token=t0k".into()
            },
            token: if public { String::new() } else { "t0k".into() },
            public,
            path_url: "http://127.0.0.1:7480/_sandbox/sb1/8000/".into(),
            address: "127.0.0.1:7480".into(),
        }
    }

    #[test]
    fn a_private_port_names_its_url_and_how_to_send_the_token() {
        let text = exposed_text("sb1", 8000, &found(false));
        assert!(text.contains("?airlock_token=t0k"), "{text}");
        assert!(text.contains("X-Airlock-Token: t0k"), "{text}");
        assert!(text.contains("/_sandbox/sb1/8000/"), "{text}");
    }

    #[test]
    fn a_public_port_needs_no_token() {
        let text = exposed_text("sb1", 8000, &found(true));
        assert!(text.contains("no token needed"), "{text}");
        assert!(!text.contains("X-Airlock-Token"), "{text}");
    }
}
