// A real OpenID Connect provider on loopback for citerag's tests: panva's certified oidc-provider, configured
// for the authorization code flow with PKCE (S256) and its built-in development login and consent pages.
//
//   node provider.mjs [PORT] [CONFIG_JSON]      (or env OIDC_PORT, OIDC_CONFIG; port 0 = any free port)
//
// CONFIG_JSON:
//   {"clients":  [{"client_id": "citerag", "client_secret": "s3cret", "redirect_uris": ["http://127.0.0.1:8000/cb"]},
//                 {"client_id": "cli", "redirect_uris": [...]}],          // no client_secret: a public client
//    "accounts": {"alice": {"name": "Alice", "email": "alice@example.org", "groups": ["staff"]}},  // id -> claims
//    "claims":   {"roles": ["roles"]},       // optional: more scopes -> the account claims they release
//    "jwks":     {"keys": [<private JWK>]},  // optional: signing keys (default: a fresh RSA key per start)
//    "ttl":      {"IdToken": 3600}}          // optional: lifetimes in seconds, oidc-provider's `ttl` names
//
// Once listening it prints one line, `READY <issuer>`, to stdout; it runs until killed.
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { createServer } from 'node:http';

import Provider, { errors } from 'oidc-provider';

const port = Number(process.argv[2] ?? process.env.OIDC_PORT ?? 0);
const config = JSON.parse(process.argv[3] ?? process.env.OIDC_CONFIG ?? '{}');
const accounts = config.accounts ?? {};

function signingKeys() {
  if (config.jwks) return config.jwks;
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const kid = randomBytes(8).toString('hex');
  return { keys: [{ ...privateKey.export({ format: 'jwk' }), kid, use: 'sig', alg: 'RS256' }] };
}

// The issuer must name the port, so listen first and attach the provider's handler once the port is known.
const server = createServer();
server.listen(port, '127.0.0.1', () => {
  const issuer = `http://127.0.0.1:${server.address().port}`;
  const provider = new Provider(issuer, {
    clients: (config.clients ?? []).map((c) => ({
      grant_types: ['authorization_code'],
      response_types: ['code'],
      // A client without a secret is public: no client authentication at the token endpoint (PKCE only).
      token_endpoint_auth_method: c.client_secret ? 'client_secret_basic' : 'none',
      ...c,
    })),
    // The login page takes an account id as its login (the password is not checked); an unknown id ends the
    // sign-in with error=access_denied at the client's redirect URI, and forgets that login (the browser's next
    // sign-in starts at the login page again).
    async findAccount(ctx, id) {
      const claims = accounts[id];
      if (!claims) {
        if (ctx?.oidc?.session?.accountId === id) await ctx.oidc.session.destroy();
        throw new errors.AccessDenied(`unknown account ${id}`);
      }
      return { accountId: id, async claims() { return { sub: id, ...claims }; } };
    },
    // Scopes and the claims each releases; `groups` is a scope of its own (and a claim of that name).
    claims: {
      openid: ['sub'],
      profile: ['name', 'preferred_username'],
      email: ['email', 'email_verified'],
      groups: ['groups'],
      ...config.claims,
    },
    // Put the scopes' claims in the ID token too, not only in userinfo (the certified default keeps them out of
    // an ID token issued beside an access token): citerag reads the identity from the ID token alone.
    conformIdTokenClaims: false,
    pkce: { required: () => true }, // PKCE for every client; oidc-provider 9 accepts S256 only
    features: {
      devInteractions: { enabled: true }, // the built-in /interaction/<uid> login and consent pages
      resourceIndicators: { enabled: false }, // opaque access tokens for userinfo; no JWT access tokens
    },
    jwks: signingKeys(),
    cookies: { keys: [randomBytes(32).toString('hex')] },
    ...(config.ttl && { ttl: config.ttl }),
  });
  server.on('request', provider.callback());
  process.stdout.write(`READY ${issuer}\n`);
});

for (const signal of ['SIGTERM', 'SIGINT']) process.on(signal, () => process.exit(0));
