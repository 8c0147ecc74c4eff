// SPDX-License-Identifier: Apache-2.0
#include "pmtree/status.h"

namespace pmtree {

std::string_view Status::CodeName(Code c) {
  switch (c) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "Invalid argument";
    case Code::kNotFound: return "Not found";
    case Code::kIoError: return "I/O error";
    case Code::kCorruption: return "Corruption";
    case Code::kIncompatible: return "Incompatible";
    case Code::kOutOfSpace: return "Out of space";
    case Code::kNotSupported: return "Not supported";
    case Code::kBusy: return "Busy";
    case Code::kInternal: return "Internal error";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(rep_->code));
  s += ": ";
  s += rep_->msg;
  return s;
}

Status Status::Annotate(std::string_view context) const {
  if (ok()) return Status();
  return Status(rep_->code, std::string(context) + ": " + rep_->msg);
}

}  // namespace pmtree
