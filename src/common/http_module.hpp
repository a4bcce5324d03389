#pragma once
// The one entry point of libtrainfit_http.so (src/http/), which common/http_server.cpp finds with
// dlsym. Both sides are built together, by the same compiler, so C++ objects cross it; the ABI
// string makes a module of another build of trainfit (another HttpBackend) refuse to be used.
// Errors cross as text, not exceptions: the module throws none out of its entry point or methods.
#include <string>

#include "common/http_server.hpp"

namespace trainfit::detail {

// A change to this header or to http_server.hpp's structs changes the string.
inline constexpr const char* kHttpModuleAbi = "trainfit-http/2";
inline constexpr const char* kHttpModuleFile = "libtrainfit_http.so";
inline constexpr const char* kHttpModuleEntry = "trainfit_make_http_backend";

class HttpBackend {
 public:
  virtual ~HttpBackend() = default;
  // The port, or 0: with `bad_address` set when the address could not be bound (an InputError for
  // the caller: in use, or not this machine's), else with `error` saying what failed.
  virtual int start(const std::string& host, int port, bool& bad_address, std::string& error) = 0;
  virtual void stop_all() = 0;
};

// nullptr with `error` set when the server cannot be made (or `abi` is not the module's own).
using MakeHttpBackend = HttpBackend* (*)(const char* abi, const HttpServerLimits& limits, const std::string& what,
                                         const HttpRoutes& routes, std::string& error);

}  // namespace trainfit::detail
