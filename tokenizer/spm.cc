// The C interface of tokenizer/spm.h over sentencepiece::SentencePieceProcessor.
#include "tokenizer/spm.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include <sentencepiece_processor.h>

struct tgc_spm {
    sentencepiece::SentencePieceProcessor sp;
};

static void say(char *why, size_t cap, const char *what)
{
    if (cap) std::snprintf(why, cap, "%s", what);
}

extern "C" tgc_spm *tgc_spm_load(const char *bytes, size_t n, char *why, size_t cap)
{
    try {
        tgc_spm *m = new tgc_spm;
        auto st = m->sp.LoadFromSerializedProto(absl::string_view(bytes, n));
        if (!st.ok()) {
            say(why, cap, st.ToString().c_str());
            delete m;
            return nullptr;
        }
        return m;
    } catch (const std::exception &e) {
        say(why, cap, e.what());
    } catch (...) {
        say(why, cap, "an unknown C++ exception in libsentencepiece");
    }
    return nullptr;
}

extern "C" void tgc_spm_free(tgc_spm *m) { delete m; }

extern "C" int64_t tgc_spm_size(const tgc_spm *m) { return m->sp.GetPieceSize(); }

extern "C" int64_t tgc_spm_eos(const tgc_spm *m)
{
    int id = m->sp.eos_id();
    return id >= 0 && id < m->sp.GetPieceSize() ? id : -1;
}

extern "C" bool tgc_spm_encode(const tgc_spm *m, const char *text, size_t n, int32_t **out, int64_t *len,
                               int64_t *cap, char *why, size_t whycap)
{
    try {
        std::vector<int> ids;
        auto st = m->sp.Encode(absl::string_view(text, n), &ids);
        if (!st.ok()) {
            say(why, whycap, st.ToString().c_str());
            return false;
        }
        if (*len + (int64_t)ids.size() > *cap) {
            int64_t want = *cap ? *cap : 1024;
            while (want < *len + (int64_t)ids.size()) want *= 2;
            void *p = std::realloc(*out, (size_t)want * sizeof **out);
            if (!p) throw std::bad_alloc();
            *out = static_cast<int32_t *>(p);
            *cap = want;
        }
        for (int id : ids) (*out)[(*len)++] = id;
        return true;
    } catch (const std::exception &e) {
        say(why, whycap, e.what());
    } catch (...) {
        say(why, whycap, "an unknown C++ exception in libsentencepiece");
    }
    return false;
}

extern "C" bool tgc_spm_decode(const tgc_spm *m, const int32_t *ids, int64_t n, char **text, size_t *len, char *why,
                               size_t whycap)
{
    *text = nullptr;
    *len = 0;
    try {
        std::vector<int> v(ids, ids + n);
        std::string s;
        auto st = m->sp.Decode(v, &s);
        if (!st.ok()) {
            say(why, whycap, st.ToString().c_str());
            return false;
        }
        char *p = static_cast<char *>(std::malloc(s.size() + 1));
        if (!p) throw std::bad_alloc();
        std::memcpy(p, s.data(), s.size());
        p[s.size()] = 0;
        *text = p;
        *len = s.size();
        return true;
    } catch (const std::exception &e) {
        say(why, whycap, e.what());
    } catch (...) {
        say(why, whycap, "an unknown C++ exception in libsentencepiece");
    }
    return false;
}
