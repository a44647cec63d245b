#ifndef PARLEY_COPENSSL_SHIM_H
#define PARLEY_COPENSSL_SHIM_H
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/hmac.h>

/* EVP_CIPHER_CTX_ctrl takes a void * for the tag; typed wrappers keep Swift honest. */
static inline int c_parley_gcm_set_ivlen(EVP_CIPHER_CTX *c, int len) {
    return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, len, NULL);
}
static inline int c_parley_gcm_get_tag(EVP_CIPHER_CTX *c, unsigned char *tag, int len) {
    return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, len, tag);
}
static inline int c_parley_gcm_set_tag(EVP_CIPHER_CTX *c, const unsigned char *tag, int len) {
    return EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, len, (void *)tag);
}
#endif
