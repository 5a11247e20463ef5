#include "runtime/config/dsrank_arguments.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace dslaunch::runtime {

absl::StatusOr<DsrankArguments> ParseDsrankArguments(const std::vector<std::string>& args) {
  DsrankArguments parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string name = args[i];
    std::string value;
    bool has_value = false;
    if (name.rfind("--", 0) == 0) {
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
    }
    auto take_value = [&]() -> absl::Status {
      if (has_value) return absl::OkStatus();
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(absl::StrCat(name, " needs a value"));
      value = args[++i];
      return absl::OkStatus();
    };
    auto take_int = [&](int64_t* out, const char* what) -> absl::Status {
      if (absl::Status taken = take_value(); !taken.ok()) return taken;
      if (!absl::SimpleAtoi(value, out)) {
        return absl::InvalidArgumentError(absl::StrCat(name, " '", value, "': needs ", what));
      }
      return absl::OkStatus();
    };
    absl::Status status;
    if (name == "--local_rank") {
      int64_t ignored = 0;
      if (!has_value && i + 1 < args.size() && absl::SimpleAtoi(args[i + 1], &ignored)) ++i;
    } else if (name == "--override") {
      status = take_value();
      if (status.ok()) parsed.overrides.push_back(value);
    } else if (name == "--loss_log") {
      status = take_value();
      if (status.ok()) parsed.loss_log = value;
    } else if (name == "--device") {
      status = take_value();
      if (status.ok() && value != "auto" && value != "cpu" && value != "cuda") {
        status = absl::InvalidArgumentError(absl::StrCat("--device '", value, "': expected auto, cpu or cuda"));
      }
      if (status.ok()) parsed.device = value;
    } else if (name == "--exit_at_step") {
      status = take_int(&parsed.exit_at_step, "a step number");
    } else if (name == "--hang_at_step") {
      status = take_int(&parsed.hang_at_step, "a step number");
    } else if (name == "--hang_rank") {
      status = take_int(&parsed.hang_rank, "a rank");
    } else if (name == "--cuda_memory_limit_gb") {
      status = take_value();
      if (status.ok() && (!absl::SimpleAtod(value, &parsed.cuda_memory_limit_gb) ||
                          !(parsed.cuda_memory_limit_gb > 0))) {
        status = absl::InvalidArgumentError(
            absl::StrCat("--cuda_memory_limit_gb '", value, "': needs a positive number of GiB"));
      }
    } else if (parsed.job_file.empty() && name.rfind("--", 0) != 0) {
      parsed.job_file = name;
    } else {
      status = absl::InvalidArgumentError(absl::StrCat("unknown argument '", args[i], "'; ", kDsrankUsage));
    }
    if (!status.ok()) return status;
  }
  if (parsed.job_file.empty()) return absl::InvalidArgumentError("missing the job file (a train.cfg)");
  return parsed;
}

}  // namespace dslaunch::runtime
