// The library's side of its HTTP servers (common/http_server.hpp): the module is found and loaded
// once, when the first server is made, and stays loaded (its threads' code must outlive them).
#include "common/http_server.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

#include "common/http_module.hpp"
#include "trainfit/error.hpp"

namespace trainfit::detail {
namespace {

struct Module {
  MakeHttpBackend make = nullptr;
  std::string error;  // why it could not be loaded
};

// TRAINFIT_HTTP_MODULE names the file; else the dynamic loader looks for it by name, in the
// run path of the program: the build tree's module folder for programs of the build, the install's
// (lib/trainfit, relative to bin/) for the installed trainfit, the installed package's for other
// programs built with it (cmake/trainfitConfig.cmake.in); and LD_LIBRARY_PATH.
Module load_module() {
  Module m;
  const char* named = std::getenv("TRAINFIT_HTTP_MODULE");
  const std::string file = named != nullptr && *named != '\0' ? named : kHttpModuleFile;
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    m.error = fmt::format(
        "trainfit's HTTP module ({}) cannot be loaded: {}; it is built and installed beside the library "
        "(lib/trainfit/), and TRAINFIT_HTTP_MODULE may name it",
        file, why != nullptr ? why : "not found");
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
  const int bound = backend_->server->start(host, port, error, bad_address);
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
