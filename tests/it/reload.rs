//! Live reload as operators trigger it: an editor's rename-on-save, a write in place (what a bind-mounted
//! file sees), a Kubernetes ConfigMap's symlink swap, and SIGHUP. A valid file serves new requests at once,
//! runs in flight finish on the route they started on, and a route keeps its state; an invalid file keeps
//! the running routes.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::Full;
use serde_json::{json, Value};

use crate::support::ag_ui::{self, finished, input, started, text, user};
use crate::support::binary::{serve_command, unique_temp_path, AgentBridge};
use crate::support::{send, within, Reply, Route, Routes, Upstream};

/// A folder of its own for the test's routes file (the proxy watches the file's folder); removed on drop.
struct ConfigFolder(PathBuf);

impl ConfigFolder {
    fn new(name: &str, routes: &Routes) -> ConfigFolder {
        let folder = ConfigFolder(unique_temp_path(name));
        std::fs::create_dir_all(&folder.0).expect("create the config folder");
        std::fs::write(folder.file(), routes.to_string()).expect("write routes.toml");
        folder
    }

    fn file(&self) -> PathBuf {
        self.0.join("routes.toml")
    }

    /// Saves as an editor does: a new file beside it, renamed over it.
    fn save_by_rename(&self, text: &str) {
        let saved = self.0.join(".routes.toml.swp");
        std::fs::write(&saved, text).expect("write the editor's file");
        std::fs::rename(&saved, self.file()).expect("rename it over routes.toml");
    }
}

impl Drop for ConfigFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn echo(name: &str, path: &str) -> Route {
    Route::new(name, path, "ag-ui", "echo")
}

fn say(thread: &str, words: &str) -> Value {
    input(thread, "r1", json!([user("u1", words)]))
}

/// The status a run request to `path` is answered with.
async fn status_of(proxy: &AgentBridge, path: &str) -> StatusCode {
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{}{path}", proxy.address))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(say("t", "hi").to_string())))
        .expect("a valid request");
    within(&format!("POST {path}"), send(request)).await.status
}

/// Waits until the proxy has logged `times` reloads.
async fn reloaded(proxy: &AgentBridge, times: usize) {
    within(&format!("reload number {times}"), async {
        while proxy.log().matches(": reloaded (").count() < times {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
}

async fn metrics(proxy: &AgentBridge) -> String {
    let request = Request::builder()
        .uri(format!("http://{}/metrics", proxy.admin))
        .body(Full::new(Bytes::new()))
        .expect("a valid request");
    let response = within("GET /metrics", send(request)).await;
    String::from_utf8_lossy(&within("its body", response.bytes()).await).into_owned()
}

/// Starts the proxy on `folder`'s file; asserts `/one` is served and `/two` is not.
async fn serving_one(folder: &ConfigFolder) -> AgentBridge {
    let proxy = AgentBridge::start(serve_command(&folder.file()));
    assert_eq!(status_of(&proxy, "/one").await, StatusCode::OK);
    assert_eq!(status_of(&proxy, "/two").await, StatusCode::NOT_FOUND);
    proxy
}

/// `/two` now answers, with the echo of what it was sent, and `/one` is gone.
async fn assert_serving_two(proxy: &AgentBridge) {
    let url = format!("http://{}/two", proxy.address);
    let events = ag_ui::run(&url, &say("t2", "after the reload")).await;
    assert!(
        ag_ui::text_of(&events).contains("after the reload"),
        "{events:#?}"
    );
    assert_eq!(status_of(proxy, "/one").await, StatusCode::NOT_FOUND);
}

fn only_two() -> String {
    Routes::default().route(echo("two", "/two")).to_string()
}

#[tokio::test]
async fn an_editors_rename_on_save_serves_the_new_routes_at_once() {
    let folder = ConfigFolder::new(
        "reload-rename",
        &Routes::default().route(echo("one", "/one")),
    );
    let proxy = serving_one(&folder).await;

    folder.save_by_rename(&only_two());
    reloaded(&proxy, 1).await;
    assert_serving_two(&proxy).await;
    let counted = metrics(&proxy).await;
    assert!(
        counted.contains(r#"agent_bridge_config_reloads_total{outcome="applied"} 1"#),
        "{counted}"
    );
}

#[tokio::test]
async fn a_write_in_place_reloads_as_a_bind_mounted_file_sees_it() {
    let folder = ConfigFolder::new(
        "reload-in-place",
        &Routes::default().route(echo("one", "/one")),
    );
    let proxy = serving_one(&folder).await;

    // Truncated and written on the same inode: what a container sees of its host's single-file mount.
    std::fs::write(folder.file(), only_two()).expect("write routes.toml in place");
    reloaded(&proxy, 1).await;
    assert_serving_two(&proxy).await;
}

#[cfg(unix)]
#[tokio::test]
async fn a_configmap_symlink_swap_reloads() {
    use std::os::unix::fs::symlink;

    // Kubernetes mounts a ConfigMap as routes.toml -> ..data/routes.toml, ..data -> ..<timestamp>, and
    // updates it by pointing ..data at a new folder in one rename.
    let folder = ConfigFolder::new("reload-configmap", &Routes::default());
    let version = |name: &str, text: &str| {
        let dir = folder.0.join(name);
        std::fs::create_dir(&dir).expect("a version folder");
        std::fs::write(dir.join("routes.toml"), text).expect("its routes.toml");
    };
    version(
        "..v1",
        &Routes::default().route(echo("one", "/one")).to_string(),
    );
    symlink("..v1", folder.0.join("..data")).expect("..data");
    std::fs::remove_file(folder.file()).expect("make room for the link");
    symlink(Path::new("..data").join("routes.toml"), folder.file()).expect("routes.toml link");
    let proxy = serving_one(&folder).await;

    version("..v2", &only_two());
    symlink("..v2", folder.0.join("..data_tmp")).expect("..data_tmp");
    std::fs::rename(folder.0.join("..data_tmp"), folder.0.join("..data")).expect("the swap");
    reloaded(&proxy, 1).await;
    assert_serving_two(&proxy).await;
}

#[cfg(unix)]
#[tokio::test]
async fn sighup_reloads_and_never_stops_the_proxy() {
    let folder = ConfigFolder::new(
        "reload-sighup",
        &Routes::default().route(echo("one", "/one")),
    );
    let proxy = serving_one(&folder).await;

    proxy.signal(libc::SIGHUP);
    reloaded(&proxy, 1).await;
    assert_eq!(status_of(&proxy, "/one").await, StatusCode::OK);
}

#[tokio::test]
async fn an_invalid_file_keeps_the_running_routes_and_says_where_it_is_wrong() {
    let folder = ConfigFolder::new(
        "reload-invalid",
        &Routes::default().route(echo("one", "/one")),
    );
    let proxy = serving_one(&folder).await;

    let invalid = Routes::default()
        .route(echo("two", "/two").set("timeuot", "30s"))
        .to_string();
    folder.save_by_rename(&invalid);
    let log = proxy.logged("not reloaded").await;
    let file = folder.file().display().to_string();
    assert!(
        log.contains(&format!("{file}:")) && log.contains("routes[0].timeuot"),
        "the file, line and key: {log}"
    );
    assert_eq!(status_of(&proxy, "/one").await, StatusCode::OK);
    assert_eq!(status_of(&proxy, "/two").await, StatusCode::NOT_FOUND);
    let counted = metrics(&proxy).await;
    assert!(
        counted.contains(r#"agent_bridge_config_reloads_total{outcome="failed"} 1"#),
        "{counted}"
    );

    // Fixed, it applies.
    folder.save_by_rename(&only_two());
    reloaded(&proxy, 1).await;
    assert_serving_two(&proxy).await;
}

#[tokio::test]
async fn a_server_wide_key_changed_is_logged_as_needing_a_restart() {
    let folder = ConfigFolder::new(
        "reload-restart",
        &Routes::default().route(echo("one", "/one")),
    );
    let proxy = serving_one(&folder).await;

    let changed = Routes::default()
        .set("log_format", "json")
        .route(echo("one", "/one"))
        .to_string();
    folder.save_by_rename(&changed);
    let log = proxy
        .logged("log_format changed; that takes a restart")
        .await;
    assert!(!log.contains(r#"{"timestamp""#), "still text: {log}");
}

#[tokio::test]
async fn a_run_in_flight_finishes_on_the_route_it_started_on() {
    let before = Upstream::serve([Reply::sse()
        .event(started())
        .gate()
        .events(text("m1", &["from ", "before"]))
        .event(finished())])
    .await;
    let after = Upstream::serve([Reply::sse()
        .event(started())
        .events(text("m1", &["from ", "after"]))
        .event(finished())])
    .await;
    let route = |upstream: &Upstream| {
        Routes::default()
            .route(Route::new("chat", "/chat", "ag-ui", "ag-ui").upstream(&upstream.url()))
    };
    let folder = ConfigFolder::new("reload-in-flight", &route(&before));
    let proxy = AgentBridge::start(serve_command(&folder.file()));
    let url = format!("http://{}/chat", proxy.address);
    let mut open = ag_ui::start(&url, &say("t1", "hello")).await;
    open.until("RUN_STARTED").await;

    folder.save_by_rename(&route(&after).to_string());
    reloaded(&proxy, 1).await;
    let new = ag_ui::run(&url, &say("t2", "hello")).await;
    assert_eq!(ag_ui::text_of(&new), "from after");

    before.release();
    let rest = within("the open run's end", open.rest()).await;
    assert_eq!(ag_ui::text_of(&rest), "from before");
    assert_eq!(ag_ui::types(&rest).last(), Some(&"RUN_FINISHED"));
}

#[tokio::test]
async fn a_routes_rate_limit_budget_survives_its_reload() {
    let limited = |timeout: &str| {
        Routes::default().route(echo("one", "/one").rate_limit_ip(2).set("timeout", timeout))
    };
    let folder = ConfigFolder::new("reload-budget", &limited("30s"));
    let proxy = AgentBridge::start(serve_command(&folder.file()));
    assert_eq!(status_of(&proxy, "/one").await, StatusCode::OK);
    assert_eq!(status_of(&proxy, "/one").await, StatusCode::OK);

    folder.save_by_rename(&limited("60s").to_string());
    reloaded(&proxy, 1).await;
    assert_eq!(
        status_of(&proxy, "/one").await,
        StatusCode::TOO_MANY_REQUESTS,
        "the budget spent before the reload is still spent"
    );
}

#[tokio::test]
async fn an_a2a_task_outlives_the_reload_of_its_route() {
    let a2a = |timeout: &str| {
        Routes::default().route(Route::new("tasks", "/a2a", "a2a", "echo").set("timeout", timeout))
    };
    let folder = ConfigFolder::new("reload-a2a-task", &a2a("30s"));
    let proxy = AgentBridge::start(serve_command(&folder.file()));
    let rpc = |method: &str, params: Value| {
        let url = format!("http://{}/a2a", proxy.address);
        let body = json!({"jsonrpc": "2.0", "id": "r1", "method": method, "params": params});
        async move { crate::support::post_json(&url, &body).await.json().await }
    };
    let message = json!({"kind": "message", "role": "user", "messageId": "m1",
                         "parts": [{"kind": "text", "text": "kept"}]});
    let sent = rpc("message/send", json!({"message": message})).await;
    let task = sent["result"]["id"].as_str().expect("a task").to_owned();

    folder.save_by_rename(&a2a("60s").to_string());
    reloaded(&proxy, 1).await;
    let got = rpc("tasks/get", json!({"id": task})).await;
    assert_eq!(got["result"]["id"], task.as_str(), "{got}");
    assert_eq!(got["result"]["status"]["state"], "completed", "{got}");
}
