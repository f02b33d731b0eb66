//! The `vllm-keda-scaler` command: parse the CLI, start logging, dispatch.

use clap::{Parser, Subcommand};

mod cli;

/// KEDA external scaler for vLLM, with its emulator, simulator and load tester.
#[derive(Debug, Parser)]
#[command(name = "vllm-keda-scaler", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve KEDA's external-scaler gRPC protocol (the production job).
    Serve(cli::serve::ServeArgs),
    /// Scrape vLLM endpoints (or saved bodies) twice and print the signals.
    Check(cli::check::CheckArgs),
    /// Run a fleet of emulated vLLM replicas on loopback.
    Emulate(cli::emulate::EmulateArgs),
    /// See it scale: emulated fleet, the real scaler, and a KEDA/HPA stand-in in one process.
    Demo(cli::demo::DemoArgs),
    /// Replay a request trace through emulated replicas in virtual time under several policies.
    Simulate(cli::simulate::SimulateArgs),
    /// Find a deployment's saturation point with the stepped open-loop load test.
    Loadtest(cli::loadtest::LoadtestArgs),
    /// Send sequential warm-up requests, then write a ready file.
    Warmup(cli::loadtest::WarmupArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The demo draws its own terminal view and sets up its own (quieter) logging.
    if !matches!(cli.command, Command::Demo(_)) {
        vllm_keda_service::telemetry::init_logging();
    }
    let result = match cli.command {
        Command::Serve(args) => vllm_keda_service::serve::run(args.into()),
        Command::Check(args) => vllm_keda_tools::check::run(args.into()),
        Command::Emulate(args) => vllm_emulator::run(args.into()),
        Command::Demo(args) => vllm_keda_tools::demo::run(args.into()),
        Command::Simulate(args) => vllm_keda_tools::simulate::run(args.into()),
        Command::Loadtest(args) => vllm_keda_tools::loadtest::run(args.into()),
        Command::Warmup(args) => vllm_keda_tools::loadtest::run_warmup(args.into()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
