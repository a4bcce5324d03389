// The library's side of its HTTP servers (common/http_server.hpp): the module is found and loaded
// once, when the first server is made, and stays loaded (its threads' code must outlive them).
#include "common/http_server.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "common/http_module.hpp"
#include "trainfit/error.hpp"

namespace trainfit::detail {
namespace {

struct Module {
  MakeHttpBackend make = nullptr;
  std::string error;  // why it could not be loaded
};

// The module's folder as seen from the install's bin folder ("../lib/trainfit"), from
// GNUInstallDirs (root CMakeLists); the build tree has the same layout below its programs' folders.
#ifndef TRAINFIT_HTTP_MODULE_FROM_BIN
#error "TRAINFIT_HTTP_MODULE_FROM_BIN must name the module's folder relative to the bin folder"
#endif

// Where the module is looked for, in order: the file TRAINFIT_HTTP_MODULE names; else beside the
// running program (TRAINFIT_HTTP_MODULE_FROM_BIN: the installed trainfit, moved or not, and the
// programs of the build tree); then in the folders of the program's run path (other programs built
// with the installed package, which gives them its folder: cmake/trainfitConfig.cmake.in). The
// dynamic loader would search that run path itself for a bare name, but it searches the run path
// of the code that calls dlopen, which under a sanitizer is the sanitizer's runtime: so the
// folders are asked for (dlinfo: LD_LIBRARY_PATH's, the run path's and the system's, in the
// loader's order) and each file opened by its path. trainfit's own programs have no run path.
std::vector<std::string> candidates() {
  const char* named = std::getenv("TRAINFIT_HTTP_MODULE");
  if (named != nullptr && *named != '\0') return {named};
  std::vector<std::string> files;
  std::error_code ec;
  const std::filesystem::path program = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec)
    files.push_back(
        (program.parent_path() / TRAINFIT_HTTP_MODULE_FROM_BIN / kHttpModuleFile).lexically_normal().string());
  if (void* self = ::dlopen(nullptr, RTLD_LAZY | RTLD_NOLOAD)) {
    Dl_serinfo size{};
    if (::dlinfo(self, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof(Dl_serinfo)) {
      std::vector<std::max_align_t> buffer((size.dls_size + sizeof(std::max_align_t) - 1) / sizeof(std::max_align_t));
      auto* info = reinterpret_cast<Dl_serinfo*>(buffer.data());
      *info = size;
      if (::dlinfo(self, RTLD_DI_SERINFO, info) == 0)
        for (unsigned i = 0; i < info->dls_cnt; ++i) {
          // Absolute folders only: an empty entry of a run path reads as the working directory,
          // where a file of that name is nothing of trainfit's.
          const char* dir = info->dls_serpath[i].dls_name;
          if (dir == nullptr || dir[0] != '/') continue;
          std::string path = (std::filesystem::path(dir) / kHttpModuleFile).lexically_normal().string();
          if (std::find(files.begin(), files.end(), path) == files.end()) files.push_back(std::move(path));
        }
    }
    ::dlclose(self);
  }
  return files;
}

Module load_module() {
  Module m;
  std::vector<std::string> tried;
  void* handle = nullptr;
  std::string file, why;
  for (const std::string& candidate : candidates()) {
    tried.push_back(candidate);
    std::error_code ec;
    // A path to no file is passed over; an existing file and the bare name are opened, and the
    // first error is kept (a module of another architecture, say).
    if (candidate.find('/') != std::string::npos && !std::filesystem::exists(candidate, ec)) continue;
    handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      file = candidate;
      break;
    }
    const char* error = ::dlerror();
    if (why.empty() && error != nullptr) why = error;
  }
  if (handle == nullptr) {
    m.error = fmt::format(
        "trainfit's HTTP module cannot be loaded: {} (looked for: {}); it is built and installed beside the library "
        "(lib/trainfit/{}), and TRAINFIT_HTTP_MODULE may name it",
        why.empty() ? "not found" : why, fmt::join(tried, ", "), kHttpModuleFile);
    return m;
  }
  m.make = reinterpret_cast<MakeHttpBackend>(::dlsym(handle, kHttpModuleEntry));
  if (m.make == nullptr)
    m.error = fmt::format("{} has no entry point {}: not trainfit's HTTP module", file, kHttpModuleEntry);
  return m;
}

const Module& module() {
  static const Module m = load_module();  // thread-safe, once
  return m;
}

}  // namespace

struct HttpServer::Backend {
  std::unique_ptr<HttpBackend> server;
  std::string what;
};

HttpServer::HttpServer(const HttpServerLimits& limits, std::string what, HttpRoutes routes)
    : backend_(std::make_unique<Backend>()) {
  const Module& m = module();
  if (m.make == nullptr) throw SystemError(fmt::format("cannot serve {}: {}", what, m.error));
  std::string error;
  backend_->server.reset(m.make(kHttpModuleAbi, limits, what, routes, error));
  if (backend_->server == nullptr) throw SystemError(fmt::format("cannot serve {}: {}", what, error));
  backend_->what = std::move(what);
}

HttpServer::~HttpServer() {
  stop_all();
}

int HttpServer::start(const std::string& host, int port) {
  std::string error;
  bool bad_address = false;
  const int bound = backend_->server->start(host, port, bad_address, error);
  if (bound > 0) return bound;
  if (bad_address)
    throw InputError(fmt::format("{}: cannot listen on {}:{} (address in use, or not an address of this machine)",
                                 backend_->what, host, port));
  throw SystemError(fmt::format("cannot serve {}: {}", backend_->what, error));
}

void HttpServer::stop_all() {
  if (backend_->server) backend_->server->stop_all();
}

}  // namespace trainfit::detail
