// Template tags: more names for a build that is here (docs/templates.md, "Tags").
#include "core/internal.h"
#include "core/templates.h"

namespace space::core {

namespace {

Result<store::TemplateRecord> Lookup(store::Store& store, const std::string& ref) {
  Result<store::TemplateRecord> rec = Fail(Errc::kNotFound, "");
  if (StartsWith(ref, "sha256:")) {
    rec = store.GetTemplateByDigest(ref);
  } else {
    auto parsed = ParseTemplateRef(ref);
    if (!parsed) return tl::unexpected(parsed.error());
    rec = store.GetTemplate(parsed->first, parsed->second);
  }
  if (!rec && rec.error().code == Errc::kNotFound) return Fail(Errc::kNotFound, "unknown template " + ref);
  return rec;
}

}  // namespace

Result<store::TemplateRecord> Platform::TagTemplate(const std::string& target, const std::string& name_tag) {
  auto to = ParseTemplateRef(name_tag);
  if (!to) return tl::unexpected(to.error());
  auto rec = Lookup(*impl_->store, target);
  if (!rec) return rec;
  // Already so: nothing changes (not even its time).
  if (auto have = impl_->store->GetTemplate(to->first, to->second); have && have->digest == rec->digest)
    return *have;
  store::TemplateRecord tagged = *rec;
  tagged.name = to->first;
  tagged.tag = to->second;
  tagged.created_ms = NowUnixMillis();
  SPACE_TRY(impl_->store->PutTemplate(tagged));
  return tagged;
}

Status Platform::UntagTemplate(const std::string& name_tag) {
  auto ref = ParseTemplateRef(name_tag);
  if (!ref) return tl::unexpected(ref.error());
  auto rec = impl_->store->GetTemplate(ref->first, ref->second);
  if (!rec) {
    if (rec.error().code == Errc::kNotFound) return Fail(Errc::kNotFound, "unknown template " + name_tag);
    return tl::unexpected(rec.error());
  }
  SPACE_TRY(impl_->store->DeleteTemplate(ref->first, ref->second));
  return Ok();
}

}  // namespace space::core
