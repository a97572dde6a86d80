//! The smallest `wasi:http/proxy` component: every request is answered
//! `200 Hello, WASI!`. `cargo xtask guests http-hello` builds it (preview1
//! proxy adapter) into target/guests/http_hello.wasm, for the peer
//! benchmark that runs it under `wasmtime serve`.
#![cfg(target_arch = "wasm32")]

use std::io::Write as _;

use wasip2::http::types::{
    Fields, IncomingRequest, OutgoingBody, OutgoingResponse, ResponseOutparam,
};

struct Hello;

impl wasip2::exports::http::incoming_handler::Guest for Hello {
    fn handle(_request: IncomingRequest, response_out: ResponseOutparam) {
        let response = OutgoingResponse::new(Fields::new());
        let body = response.body().expect("a new response has a body");
        ResponseOutparam::set(response_out, Ok(response));
        let mut out = body.write().expect("the body's stream");
        out.write_all(b"Hello, WASI!").expect("the body is written");
        out.flush().expect("the body is flushed");
        drop(out);
        OutgoingBody::finish(body, None).expect("the body is finished");
    }
}

wasip2::http::proxy::export!(Hello);
