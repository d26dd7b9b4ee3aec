use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use agent_bridge::config::{Config, ConfigError, LogFormat};
use agent_bridge::error::Error;
use agent_bridge::routes_view;
use agent_bridge::server::{Admin, Reload, Server};
use agent_bridge::workers::Workers;

const DEFAULT_CONFIG: &str = "routes.toml";

/// jemalloc gives freed memory back to the system within seconds and keeps fragmentation low across the
/// serving threads: after a burst the proxy's RSS comes back down, where glibc's malloc keeps the burst's
/// high-water mark (benches/SOAK.md).
#[cfg(all(feature = "jemalloc", not(target_env = "msvc")))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A protocol-translation proxy for AI agents (AG-UI, A2A, AgentScope, AG-Kit, CMDC).
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// The routes file [default: ./routes.toml, or the built-in echo routes when there is none].
    #[arg(long, short, global = true)]
    config: Option<PathBuf>,
    /// Listen address, overriding `listen` in the routes file (e.g. 0.0.0.0:8080).
    #[arg(long, global = true)]
    listen: Option<std::net::SocketAddr>,
    /// Where /metrics and /readyz are served, overriding `admin_listen` in the routes file
    /// [default: 127.0.0.1:9091].
    #[arg(long, global = true)]
    admin_listen: Option<std::net::SocketAddr>,
    /// Log lines as `text` or `json` (one object per line), overriding `log_format` in the routes file.
    #[arg(long, global = true, value_name = "text|json")]
    log_format: Option<LogFormat>,
    /// Serving threads [default: one per CPU core].
    #[arg(long, global = true)]
    threads: Option<NonZeroUsize>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the routes (the default).
    Serve,
    /// Validate the routes file and exit.
    Check,
    /// Print the routes (pair, upstream, auth, downgrades; no secrets) and exit.
    Routes,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (mut config, file) = match load(cli.config.as_deref()) {
        Ok(loaded) => loaded,
        Err(error) => {
            eprintln!("error: {error}");
            return ExitCode::FAILURE;
        }
    };
    agent_bridge::logging::init(cli.log_format.unwrap_or(config.log_format));
    if file.is_none() {
        tracing::info!("no {DEFAULT_CONFIG} here; serving the built-in echo routes");
    }
    // What a reload compares the file's next version with: its own values, not the command line's.
    let file = file.map(|path| (path, config.clone()));
    if let Some(listen) = cli.listen {
        config.listen = listen;
    }
    if let Some(admin_listen) = cli.admin_listen {
        config.admin_listen = admin_listen;
    }
    // This thread's runtime only binds, and waits for the signal to stop: the serving threads have their own.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Check => runtime
            .block_on(agent_bridge::server::check(&config))
            .map(|()| {
                let file = cli.config.as_deref().unwrap_or(Path::new(DEFAULT_CONFIG));
                println!("{}: ok ({} routes)", file.display(), config.routes.len());
            }),
        Command::Routes => {
            print!("{}", routes_view::table(&routes_view::describe(&config)));
            Ok(())
        }
        Command::Serve => {
            let threads = cli.threads.unwrap_or_else(|| {
                std::thread::available_parallelism().unwrap_or(NonZeroUsize::MIN)
            });
            runtime.block_on(serve(config, file, threads))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// The routes file named, else `./routes.toml`, else the shipped one built into the binary (the echo routes);
/// the file's path (none for the built-in one).
fn load(path: Option<&Path>) -> Result<(Config, Option<PathBuf>), ConfigError> {
    const SHIPPED: &str = include_str!("../routes.toml");
    let path = match path {
        Some(path) => path,
        None if Path::new(DEFAULT_CONFIG).exists() => Path::new(DEFAULT_CONFIG),
        None => return Ok((Config::parse(SHIPPED, "routes.toml (built in)")?, None)),
    };
    Ok((Config::load(path)?, Some(path.to_owned())))
}

/// Serves `config`, reloading the routes of `file` (its path, and the configuration read from it) as it
/// changes.
async fn serve(
    config: Config,
    file: Option<(PathBuf, Config)>,
    threads: NonZeroUsize,
) -> agent_bridge::error::Result<()> {
    // Before the first request: a run's span is made with what it installs.
    let telemetry =
        agent_bridge::telemetry::init(&config.telemetry, tokio::runtime::Handle::current())?;
    let workers = Workers::start(threads, "agent-bridge")
        .map_err(|e| Error::internal(format!("cannot start the serving threads: {e}")))?;
    let server = Server::bind(&config).await?;
    let admin = Admin::bind(config.admin_listen, server.admin_state()).await?;
    // Installed before the address is logged: whoever reads it may signal at once.
    let shutdown = agent_bridge::server::shutdown_signal();
    let reload = Reload::start(server.reloader(), file);
    tracing::info!(
        "admin (/metrics, /readyz, /routes) on http://{}",
        admin.local_addr()
    );
    tracing::info!(
        "agent-bridge listening on http://{} ({threads} threads)",
        server.local_addr()
    );
    // On this thread's runtime, which otherwise only waits for the signal: it answers while the serving
    // threads are busy, and through the drain.
    let admin = tokio::spawn(admin.serve());
    let reload = tokio::spawn(reload.run());
    let serving = server.start_on(&workers)?;
    shutdown.await;
    reload.abort();
    serving.stop().await;
    admin.abort();
    if let Some(telemetry) = telemetry {
        telemetry.shutdown().await;
    }
    Ok(())
}
