//! The web playground (`GET /` and `GET /assets/{path}`), served from the files `tollgate-agent-playground`
//! embeds in the binary.
//!
//! These routes need no token (docs/api.md: the playground's static files are public); the playground itself
//! calls the `/v1` API with the user's token. `no-cache` makes a browser revalidate, so a new binary's
//! page is never mixed with an old one's scripts.

use crate::AppState;
use crate::problem::ApiError;
use axum::Router;
use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

/// The playground's routes, merged into the server's router at `/`.
pub(crate) fn routes() -> Router<AppState> {
    Router::new().route("/", get(index)).route("/assets/{*path}", get(asset))
}

async fn index() -> Response {
    serve("")
}

async fn asset(Path(path): Path<String>) -> Response {
    serve(&path)
}

fn serve(path: &str) -> Response {
    match tollgate_agent_playground::asset(path) {
        Some((content_type, body)) => {
            ([(header::CONTENT_TYPE, content_type), (header::CACHE_CONTROL, "no-cache")], body).into_response()
        }
        None => ApiError::not_found(format!("the playground has no file `{path}`")).into_response(),
    }
}
